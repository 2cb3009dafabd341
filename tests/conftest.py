"""Shared fixtures. Tests run the real LoadGen; runs go to a temporary directory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
# test-only backends/tasks live in tests/ and must import in the run's child process too
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    return tmp_path / "runs"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@official(...)``: the referee must be there (skip with the reason; fail under CI=true)."""
    from referee import require

    for mark in item.iter_markers("official"):
        require(*mark.args, **mark.kwargs)
