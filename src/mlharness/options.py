"""Typed option tables: the base model every task and backend declares its options with, and the
one translation of a pydantic validation error into a one-line ConfigError naming the key."""

from __future__ import annotations

import math
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from mlharness.errors import ConfigError, HarnessError

M = TypeVar("M", bound=BaseModel)


class Options(BaseModel):
    """Base of a task's (``--task-option``) or backend's (``--backend-option``) option model:
    unknown keys are refused, numbers must be finite, numbers given for text are kept as text."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, coerce_numbers_to_str=True,
                              frozen=True)


class NoOptions(Options):
    """For tasks and backends that take no options."""


class FreeOptions(Options):
    """The table as given, for a backend that declares no ``options_model``: each key is an
    attribute (``options.extra.delay_ms``), ``model_dump()`` the whole table."""

    model_config = ConfigDict(extra="allow")


class RuleError(ValueError):
    """A rule between settings, with its own hint (raised inside validators)."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


def parse_scalar(text: str) -> int | float | str:
    """A ``KEY=VALUE`` value from the command line: an int, else a float, else the text."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_options(model: type[M], data: dict[str, Any] | None, what: str, flag: str) -> M:
    """``data`` validated by ``model``; ConfigError naming the key and the valid keys."""
    try:
        return model.model_validate(dict(data or {}))
    except ValidationError as exc:
        raise config_error(exc, model, what, flag) from None


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


#: the plain types pydantic names a location after when a value failed every member of a
#: union (``int | None``); the others are ``constrained-float``, ``literal['auto']``,
#: ``function-after[...]``
_UNION_TYPES = frozenset({"int", "float", "str", "bool", "none", "list", "dict", "tuple"})


def _union_member(part: int | str) -> bool:
    return isinstance(part, str) and (part in _UNION_TYPES or "[" in part
                                      or part.startswith("constrained-"))


def field_path(loc: tuple[int | str, ...] | list[int | str]) -> str:
    """A validation error's location as the user wrote it (``target_qps``,
    ``benchmarks.3d-unet-99.Offline.target_qps``): without the union members pydantic appends."""
    return ".".join(str(part) for n, part in enumerate(loc) if n == 0 or not _union_member(part))


def config_error(exc: ValidationError, model: type[BaseModel], what: str = "setting",
                 flag: str | None = None) -> HarnessError:
    """The first problem of ``exc`` as one line + hint. ``flag`` (e.g. ``--task-option``) is how a
    key is given; None: each key is its own flag."""
    err = exc.errors(include_url=False)[0]
    ctx = err.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, RuleError):
        return ConfigError(cause.message, hint=cause.hint)
    if isinstance(cause, HarnessError):
        return cause
    loc = field_path(err["loc"])
    key = str(err["loc"][0]) if err["loc"] else ""
    how = f"{flag} {key}=..." if flag else _flag(key)
    if err["type"] == "extra_forbidden":
        valid = ", ".join(sorted(model.model_fields)) or "none"
        return ConfigError(f"unknown {what}: {loc}", hint=f"valid keys: {valid}")
    if err["type"] == "missing":
        return ConfigError(f"{what} {loc} is required", hint=f"give {how}")
    value = err.get("input")
    if err["type"] in ("greater_than", "greater_than_equal"):
        op, bound = (">", ctx.get("gt")) if err["type"] == "greater_than" else (">=", ctx.get("ge"))
        return ConfigError(f"{loc} must be {op} {bound}, got {value!r}",
                           hint=f"give a number {op} {bound} ({how})")
    if err["type"] in ("literal_error", "enum"):
        return ConfigError(f"unknown {key} {value!r}",
                           hint="choose one of: " + str(ctx.get("expected", "")).replace("'", ""))
    message = str(cause) if cause is not None else err["msg"]
    if err["type"].startswith("finite_number") or (isinstance(value, float)
                                                   and not math.isfinite(value)):
        message = "must be a finite number"
    message = message.removeprefix("Value error, ")
    hint = {"valid": "valid = true for --valid, false for --test (the default)"}.get(
        key, f"check {key} ({how} in --help)")
    return ConfigError(f"bad {what}s: {loc} = {value!r}: {message}", hint=hint)
