"""The argparse flags of the run settings, built from their declarations on RunSpec's fields
(``mlharness.flags``): one flag per field, its dest the field name, its type and the default in
its help the field's own."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable, Literal, get_origin

from mlharness.flags import Declared, choices_of, declared, plain_types
from mlharness.spec import AUTO, RunSpec

#: a parser or one of its groups (argparse keeps both private)
Container = Any


def key_value(text: str) -> tuple[str, str]:
    """A repeated ``KEY=VALUE`` flag (``--set``, ``--task-option``, ...)."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


def target(text: str) -> float | str:
    """A target: a number, or 'auto' (measured first)."""
    if text.strip().lower() == AUTO:
        return AUTO
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {text!r}") from None


def run_settings() -> dict[str, Declared]:
    """RunSpec's settings with a flag (its sections' too), by field name."""
    return {d.field: d for d in declared(RunSpec)}


#: settings given as repeated KEY=VALUE flags (TOML: a table of the same name)
TABLE_KEYS = tuple(name for name, s in run_settings().items() if s.shape == "table")


def add_shared_flags(p: argparse.ArgumentParser, groups: dict[str, Container]) -> None:
    """The flags of every run setting the run commands share, each in its --help section
    (``groups``: the sections made so far, by title; new ones are added in field order)."""
    for setting in run_settings().values():
        if setting.flag.shared:
            add_flag(section(p, groups, setting.flag.group), setting)


def section(p: argparse.ArgumentParser, groups: dict[str, Container], title: str) -> Container:
    if not title:
        return p
    if title not in groups:
        groups[title] = p.add_argument_group(title)
    return groups[title]


def add_flag(container: Container, setting: Declared, **overrides: Any) -> argparse.Action:
    """One setting's flag (``overrides``: argparse keywords a command sets its own way, e.g.
    ``required``; a ``help`` of its own may say ``{default}`` too)."""
    flag, info, name = setting.flag, setting.info, setting.field
    options = [setting.option, *([flag.short] if flag.short else [])]
    kwargs: dict[str, Any] = {"dest": name,
                              "help": flag.help_text(info, overrides.pop("help", None)) or None}
    if setting.shape == "switch":
        default = info.get_default()
        if flag.default_flag:  # --test | --valid: one of two, exclusive
            container = container.add_mutually_exclusive_group()
            container.add_argument(flag.default_flag, dest=name, action="store_const",
                                   const=default, help=f"{flag.default_help} (default)")
        kwargs.update(action="store_const", const=not default)
    elif setting.shape in ("table", "list"):
        kwargs.update(action="append", metavar=flag.metavar,
                      type=key_value if setting.shape == "table" else str)
    else:
        kwargs.update(metavar=flag.metavar, type=value_type(setting))
        if flag.closed:
            kwargs["choices"] = choices_of(info)
    return container.add_argument(*options, **{**kwargs, **overrides})


def value_type(setting: Declared) -> Callable[[str], Any]:
    """What argparse turns the text into: the field's type (a target: a number or 'auto')."""
    kinds = plain_types(setting.info.annotation)
    if any(get_origin(k) is Literal for k in kinds) and float in kinds:
        return target
    return next((k for k in (int, float, Path) if k in kinds), str)

