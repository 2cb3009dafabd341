"""Optional extras in the tests: under ``make test`` (which installs every extra and sets
MLHARNESS_REQUIRE_EXTRAS=1) or CI=true a missing one fails instead of hiding tests behind a
green skip (conftest.py applies this to ``pytest.importorskip`` too)."""

from __future__ import annotations

import importlib.util
import os

import pytest


def extras_required() -> bool:
    return (os.environ.get("CI", "").lower() == "true"
            or os.environ.get("MLHARNESS_REQUIRE_EXTRAS") == "1")


def missing_extra(modname: str, why: str) -> None:
    """Fail where every extra must be installed; otherwise nothing (the caller skips)."""
    if extras_required():
        pytest.fail(f"{modname} is missing ({why}); `make test` installs every extra",
                    pytrace=False)


def has_extra(modname: str) -> bool:
    """Whether ``modname`` can be imported (for a test that checks more when it can)."""
    if importlib.util.find_spec(modname) is not None:
        return True
    missing_extra(modname, "not installed")
    return False
