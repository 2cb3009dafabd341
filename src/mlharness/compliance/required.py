"""Which compliance tests a benchmark needs, per round (closed and network divisions only).

The round rules (``mlharness.rules``, ``compliance_tests`` per benchmark) are the source; the
small table below covers rounds they do not describe (v5.0). Both come from
``tools/submission/submission_checker/constants.py`` ``models_TEST01`` / ``models_TEST04``.
"""

from __future__ import annotations

from mlharness.errors import ConfigError

_TEST01_V5_V6_0 = ("resnet", "retinanet", "bert-99", "bert-99.9")
_FALLBACK: dict[str, dict[str, tuple[str, ...]]] = {
    "v6.1": {"TEST01": ("resnet", "bert-99", "bert-99.9"), "TEST04": ("resnet",)},
    "v6.0": {"TEST01": _TEST01_V5_V6_0, "TEST04": ("resnet",)},
    "v5.1": {"TEST01": _TEST01_V5_V6_0, "TEST04": ("resnet",)},
    "v5.0": {"TEST01": _TEST01_V5_V6_0, "TEST04": ("resnet",)},
}

#: our benchmark names -> the checker's; the demo is audited like resnet (it stands in for it)
_CHECKER_NAME = {"resnet50": "resnet", "demo": "resnet"}


def _from_rules(name: str, version: str) -> list[str] | None:
    try:
        from mlharness.rules import ROUNDS, load
    except ImportError:
        return None
    if version not in ROUNDS:
        return None
    bench = load(version).find(name)
    return [] if bench is None else [t for t in bench.compliance_tests if t in ("TEST01", "TEST04")]


def required_tests(benchmark: str, version: str = "v6.1", division: str = "closed") -> list[str]:
    """The compliance tests (TEST01, TEST04) ``benchmark`` needs in ``version``; none in open."""
    if version not in _FALLBACK:
        raise ConfigError(f"unknown round {version!r}",
                          hint="choose one of: " + ", ".join(_FALLBACK))
    if division.lower() == "open":
        return []
    name = _CHECKER_NAME.get(benchmark, benchmark)
    tests = _from_rules(name, version)
    if tests is None:
        tests = [test for test, models in _FALLBACK[version].items() if name in models]
    return tests
