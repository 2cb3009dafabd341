"""Benchmark and scenario names given to `runs` and `compare`: an unknown one is said, with the
names known, instead of an empty table."""

from __future__ import annotations

import difflib
from typing import Iterable

from mlharness.errors import ConfigError
from mlharness.names import Scenario
from mlharness.tasks import BENCHMARKS


def check_benchmark(name: str | None, seen: Iterable[str]) -> None:
    """ConfigError when ``name`` is neither a registered benchmark nor one in ``seen`` (the
    benchmarks of the runs or tables at hand), with the closest known name."""
    if not name:
        return

    known = sorted({*BENCHMARKS, *(s for s in seen if s and s != "?")})
    if name in known:
        return
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    close = close or [k for k in known if k.startswith(name)][:1]
    guess = f"did you mean {close[0]}? " if close else ""
    raise ConfigError(f"no benchmark named {name}",
                      hint=f"{guess}known: {', '.join(known)}")


SCENARIOS = tuple(Scenario)


def check_scenario(name: str | None) -> None:
    """ConfigError when ``name`` is not one of the four scenarios (any case)."""
    if not name or name.lower() in {s.lower() for s in SCENARIOS}:
        return
    by_lower = {s.lower(): s for s in SCENARIOS}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.5)
    guess = f"did you mean {by_lower[close[0]]}? " if close else ""
    raise ConfigError(f"no scenario named {name}", hint=f"{guess}known: {', '.join(SCENARIOS)}")
