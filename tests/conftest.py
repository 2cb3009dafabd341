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


#: modules whose tests share a fixed resource (the NTP responder on 127.0.0.1:123)
SHARED_GROUPS = {"test_power_e2e": "power", "test_power_faults": "power",
                 "test_power_unit": "power"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under ``pytest -n N --dist loadgroup`` (``make test``) each module runs on one worker, so
    its module-scoped fixtures are built once; the power modules share a worker."""
    for item in items:
        module = item.module.__name__ if item.module else item.nodeid
        item.add_marker(pytest.mark.xdist_group(SHARED_GROUPS.get(module, module)))
