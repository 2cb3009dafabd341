"""Which compliance tests a benchmark needs, per round.

Fallback table until the round rules in ``mlharness.rules`` carry it; from
``tools/submission/submission_checker/constants.py`` ``models_TEST01`` / ``models_TEST04``
(checker benchmark names). Compliance applies to the closed and network divisions only.
"""

from __future__ import annotations

from mlharness.errors import ConfigError

_TEST01_V5_V6_0 = ("resnet", "retinanet", "bert-99", "bert-99.9")
_REQUIRED: dict[str, dict[str, tuple[str, ...]]] = {
    # v6.1 dropped retinanet
    "v6.1": {"TEST01": ("resnet", "bert-99", "bert-99.9"), "TEST04": ("resnet",)},
    "v6.0": {"TEST01": _TEST01_V5_V6_0, "TEST04": ("resnet",)},
    "v5.1": {"TEST01": _TEST01_V5_V6_0, "TEST04": ("resnet",)},
    "v5.0": {"TEST01": _TEST01_V5_V6_0, "TEST04": ("resnet",)},
}

#: our benchmark names -> the checker's (``resnet50`` is ``resnet`` there); the demo is audited
#: like resnet so that it can show the whole flow.
_CHECKER_NAME = {"resnet50": "resnet", "demo": "resnet"}


def required_tests(benchmark: str, version: str = "v6.1", division: str = "closed") -> list[str]:
    """The compliance tests ``benchmark`` needs in ``version`` (none in the open division)."""
    if version not in _REQUIRED:
        raise ConfigError(f"unknown round {version!r}",
                          hint="choose one of: " + ", ".join(_REQUIRED))
    if division.lower() == "open":
        return []
    name = _CHECKER_NAME.get(benchmark, benchmark)
    return [test for test, models in _REQUIRED[version].items() if name in models]
