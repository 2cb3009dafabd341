"""A setting's command-line face, declared once on its model field:
``max_samples: Annotated[PositiveInt | None, Flag("use only the first N samples", "N")] = None``.

The field name is the TOML key and the argparse dest, its flag the name with dashes (unless
``name`` says otherwise); the type, the default and ``{default}`` in the help come from the field.
``cli/spec_flags.py`` builds the argparse flags from these declarations, ``command_words`` the
flags that give a set of values back (the reproduce command of a run).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

#: the --help sections of the run flags, in the order they are shown
WHAT = "what to run"
LOADGEN = "LoadGen settings (written into user.conf)"
HOW = "how to run it"
WHERE = ("where the samples run: this process (default), `mlharness serve` nodes or Ray actors "
         "(docs/distributed.md)")

#: how a field is given: a value, an on/off switch (a bool), repeated KEY=VALUE (a table) or a
#: repeated value (a list)
Shape = Literal["value", "switch", "table", "list"]


@dataclass(frozen=True)
class Flag:
    """How a field is given on the command line; ``{default}`` in ``help`` is its default."""

    help: str
    metavar: str | None = None
    group: str = ""  # the --help section ("": the command's own options)
    short: str | None = None  # e.g. "-b"
    name: str | None = None  # the flag when it is not --<field-with-dashes>
    #: a switch's other flag, the one that names its default (--test beside --valid): the two
    #: exclude each other
    default_flag: str | None = None
    default_help: str = ""
    closed: bool = False  # only the type's values (an Enum's or a Literal's) are offered
    shared: bool = True  # False: only the commands that own it declare it (`run`'s --mode)
    user_conf: str | None = None  # the user.conf key it writes (`--set` of that key is refused)

    def option(self, field: str) -> str:
        return self.name or "--" + field.replace("_", "-")

    def help_text(self, info: FieldInfo, text: str | None = None) -> str:
        """``text`` (default: the declared help) with the field's default for ``{default}``."""
        return (self.help if text is None else text).replace("{default}",
                                                             as_text(plain_default(info)))


@dataclass(frozen=True)
class Declared:
    """One field with a flag: its model, name, declaration and pydantic field."""

    model: type[BaseModel]
    field: str
    flag: Flag
    info: FieldInfo

    @property
    def option(self) -> str:
        return self.flag.option(self.field)

    @property
    def shape(self) -> Shape:
        return shape(self.info)


def flag_of(info: FieldInfo) -> Flag | None:
    return next((m for m in info.metadata if isinstance(m, Flag)), None)


def section_of(info: FieldInfo) -> type[BaseModel] | None:
    """The model of a section field (RunSpec.distribution), whose fields have flags of their own."""
    kind = info.annotation
    return kind if isinstance(kind, type) and issubclass(kind, BaseModel) else None


def declared(model: type[BaseModel]) -> Iterator[Declared]:
    """The fields of ``model`` and of its sections that have a flag, in field order."""
    for name, info in model.model_fields.items():
        section = section_of(info)
        if section is not None:
            yield from declared(section)
        elif (flag := flag_of(info)) is not None:
            yield Declared(model, name, flag, info)


@functools.cache
def user_conf_owners(model: type[BaseModel]) -> dict[str, str]:
    """The user.conf keys that flags of ``model`` write, each with its flags
    (``{"target_latency": "--target-latency or --server-latency"}``)."""
    owners: dict[str, list[str]] = {}
    for d in declared(model):
        if d.flag.user_conf:
            owners.setdefault(d.flag.user_conf, []).append(d.option)
    return {key: " or ".join(options) for key, options in owners.items()}


def plain_types(annotation: Any) -> list[Any]:
    """The types a field takes, Annotated and None left out (``Target | None``: float, auto)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return plain_types(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [t for arg in get_args(annotation) for t in plain_types(arg)]
    return [] if annotation is type(None) else [annotation]


def shape(info: FieldInfo) -> Shape:
    first = plain_types(info.annotation)[0]
    if first is bool:
        return "switch"
    return {dict: "table", list: "list"}.get(get_origin(first) or first, "value")  # type: ignore[return-value]


def choices_of(info: FieldInfo) -> list[str]:
    """The values an Enum or Literal field takes."""
    out: list[str] = []
    for kind in plain_types(info.annotation):
        if get_origin(kind) is Literal:
            out += [str(v) for v in get_args(kind)]
        elif isinstance(kind, type) and issubclass(kind, Enum):
            out += [str(m.value) for m in kind]
    return out


def plain_default(info: FieldInfo) -> Any:
    """The field's default as it reads in JSON and TOML (a path or name as its text); None for a
    field without one."""
    if info.is_required():
        return None
    value = info.get_default(call_default_factory=True)
    if isinstance(value, Enum):
        return value.value
    return str(value) if isinstance(value, Path) else value


def as_text(value: Any) -> str:
    """A value as typed on the command line: 60.0 as 60, a list as a,b."""
    if isinstance(value, (list, tuple)):
        return ",".join(as_text(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value.value if isinstance(value, Enum) else value)


def command_words(model: type[BaseModel], values: dict[str, Any],
                  always: Collection[str] = (), skip: Collection[str] = ()) -> list[str]:
    """The flags that give ``values`` (a model's JSON): a value equal to its field's default is
    left out, except the fields in ``always``; a switch with a ``default_flag`` always says which."""
    out: list[str] = []
    for name, info in model.model_fields.items():
        section, flag, value = section_of(info), flag_of(info), values.get(name)
        if section is not None:
            out += command_words(section, value or {}, always, skip)
            continue
        if flag is None or name in skip or value is None:
            continue
        option, default, kind = flag.option(name), plain_default(info), shape(info)
        if kind == "switch":
            if value != default:
                out.append(option)
            elif flag.default_flag:
                out.append(flag.default_flag)
        elif kind == "table":
            for key, item in sorted(value.items()):
                out += [option, f"{key}={as_text(item)}"]
        elif kind == "list":
            for item in value:
                out += [option, as_text(item)]
        elif name in always or value != default:
            out += [option, as_text(value)]
    return out
