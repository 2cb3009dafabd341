"""A small grid over engine settings (``--search batch_size=1,8,32 workers=1,2``)."""

from __future__ import annotations

import itertools
from typing import Any, Callable

from mlharness.errors import ConfigError
from mlharness.options import parse_scalar
from mlharness.spec import RunSpec
from mlharness.tune.probe import ENGINE_SETTINGS

SEARCHABLE = tuple(k for k in ENGINE_SETTINGS if k not in ("device", "backend"))


def _value(text: str) -> Any:
    """A number, a boolean (``true``/``false``, for length_sort) or the text."""
    value = parse_scalar(text)
    return {"true": True, "false": False}.get(value.lower(), value) if isinstance(value, str) \
        else value


def parse_search(items: list[str] | None) -> dict[str, list[Any]]:
    """``["batch_size=1,8,32", "workers=1,2"]`` -> ``{"batch_size": [1, 8, 32], ...}``."""
    axes: dict[str, list[Any]] = {}
    for item in items or []:
        key, sep, values = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not values.strip():
            raise ConfigError(f"--search {item!r}: expected KEY=V1,V2,...",
                              hint="e.g. --search batch_size=1,8,32 workers=1,2")
        if key not in SEARCHABLE:
            raise ConfigError(f"--search: {key!r} is not an engine setting",
                              hint="choose from: " + ", ".join(sorted(set(SEARCHABLE))))
        axes[key] = [_value(v.strip()) for v in values.split(",") if v.strip()]
    return axes


def grid_specs(spec: RunSpec, axes: dict[str, list[Any]]) -> list[RunSpec]:
    """One spec per combination of the axes (just ``spec`` when there are none)."""
    if not axes:
        return [spec]
    keys = list(axes)
    return [spec.replace(**dict(zip(keys, combo)))
            for combo in itertools.product(*(axes[k] for k in keys))]


def best_of(specs: list[RunSpec], tune_one: Callable[[RunSpec], Any]) -> tuple[Any, list[Any]]:
    """Tune every spec; return the best result (``better_than``) and all of them."""
    results = [tune_one(s) for s in specs]
    best = None
    for r in results:
        if r.better_than(best):
            best = r
    return best, results
