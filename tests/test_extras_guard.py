"""`make test` installs every extra, so there a test that finds one missing fails instead of
skipping (tests/extras.py, conftest.py); elsewhere it skips with the reason."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
PROBE = '''
import pytest
from extras import has_extra

def test_importorskip():
    pytest.importorskip("mlharness_no_such_extra")

def test_has_extra():
    if not has_extra("mlharness_no_such_extra"):
        pytest.skip("not installed")
'''


def _outcome(tmp_path: Path, required: bool) -> str:
    """The summary line of pytest run on PROBE with the suite's conftest.py as a plugin."""
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "MLHARNESS_REQUIRE_EXTRAS")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
    if required:
        env["MLHARNESS_REQUIRE_EXTRAS"] = "1"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "-p", "conftest", "test_probe.py"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else done.stderr[-800:]


def test_a_missing_extra_fails_under_make_test_and_skips_elsewhere(tmp_path: Path) -> None:
    for name in ("required", "free"):
        (tmp_path / name).mkdir()
    assert _outcome(tmp_path / "required", required=True).startswith("2 failed")
    assert _outcome(tmp_path / "free", required=False).startswith("2 skipped")
