"""The official referee for tests: where it is, which Python runs it, and what a missing one does.

One variable names it: ``MLPERF_INFERENCE_DIR``, a checkout of github.com/mlcommons/inference
(never modified); by default ``../shared/official/inference`` beside the repository, the pinned
copy whose README lists what it holds. The BERT ``tokenization`` module the official BERT scripts
import (a git submodule upstream) is ``bert-tokenization/`` beside that folder.

The official scripts run in the referee's own Python, ``MLPERF_REFEREE_PYTHON``, by default
``.venv-referee/bin/python``, which ``make referee`` (part of ``make test``) builds from
``tests/referee-requirements.txt``: they import what mlharness does not (``six``,
``pkg_resources``, ``transformers``) and must not lean on our environment.

A missing piece skips the test with the reason; under ``CI=true`` it fails instead, so CI never
passes without the comparisons. Mark a test ``@official(...)`` (checked before it runs) or call
:func:`require` where the comparison starts, after the test's own checks.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
INFERENCE = Path(os.environ.get("MLPERF_INFERENCE_DIR")
                 or REPO.parent / "shared" / "official" / "inference")
TOKENIZATION = INFERENCE.parent / "bert-tokenization"
REFEREE_PYTHON = Path(os.environ.get("MLPERF_REFEREE_PYTHON")
                      or REPO / ".venv-referee" / "bin" / "python")
#: whisper's referee (speech2text/): a Python of its own, since openai-whisper needs torch
#: (``make referee-whisper`` builds it from tests/referee-whisper-requirements.txt)
WHISPER_PYTHON = Path(os.environ.get("MLPERF_WHISPER_REFEREE_PYTHON")
                      or REPO / ".venv-referee-whisper" / "bin" / "python")
WHISPER_MODULES = ("numpy", "torch", "whisper.normalizers", "librosa", "soundfile", "sox", "pandas")
#: what the official scripts import beyond the standard library (see referee-requirements.txt)
REFEREE_MODULES = ("numpy", "six", "pkg_resources", "transformers", "pycocotools", "yaml", "cv2")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

official = pytest.mark.official
"""``@official("compliance/TEST01", python=True)``: paths under the checkout the test needs, and
whether it runs scripts in the referee's Python (conftest checks before the test runs)."""


@functools.lru_cache(maxsize=None)
def _python_problem() -> str | None:
    if not REFEREE_PYTHON.is_file():
        return (f"the referee's Python is not at {REFEREE_PYTHON}: run `make referee` "
                "(or set MLPERF_REFEREE_PYTHON)")
    probe = subprocess.run([str(REFEREE_PYTHON), "-c", f"import {', '.join(REFEREE_MODULES)}"],
                           capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return f"the referee's Python {REFEREE_PYTHON} lacks a module ({last}): run `make referee`"
    return None


def missing(*paths: str, python: bool = False) -> str | None:
    """Why the referee cannot run (None when it can)."""
    if not INFERENCE.is_dir():
        return (f"official referee not found at {INFERENCE}: set MLPERF_INFERENCE_DIR to a "
                "checkout of github.com/mlcommons/inference (default ../shared/official/inference)")
    for rel in paths:
        if not (INFERENCE / rel).exists():
            return f"{rel} missing from the official checkout {INFERENCE}"
    if python:
        if not (TOKENIZATION / "tokenization.py").is_file():
            return f"the BERT tokenization module is not at {TOKENIZATION}/tokenization.py"
        return _python_problem()
    return None


def require(*paths: str, python: bool = False) -> None:
    """Skip (fail under CI=true) unless the referee and ``paths`` under it are there."""
    reason = missing(*paths, python=python)
    if reason is None:
        return
    if IN_CI:
        pytest.fail(f"CI must run the official comparison: {reason}", pytrace=False)
    pytest.skip(reason)


#: earlier rounds' official files (checker, mlperf.conf, compliance) at each round's tag
ROUNDS_DIR = INFERENCE.parent / "rounds"


def round_dir(round: str, *paths: str) -> Path:
    """``ROUNDS_DIR/round``, skipping (failing under CI=true) when it or ``paths`` are missing."""
    base = ROUNDS_DIR / round
    for rel in ("", *paths):
        if not (base / rel).exists():
            reason = f"{base / rel} missing: the pinned official rounds (../shared/official/rounds)"
            if IN_CI:
                pytest.fail(f"CI must run the official comparison: {reason}", pytrace=False)
            pytest.skip(reason)
    return base


def python(*args: str, cwd: Path | None = None, check: bool = True,
           timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the referee's Python with ``args``; on its path only the BERT tokenization module
    (nothing of ours)."""
    require(python=True)
    env = dict(os.environ, PYTHONPATH=str(TOKENIZATION))
    proc = subprocess.run([str(REFEREE_PYTHON), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, \
            f"{' '.join(args)[:300]} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    return proc


def run(script: str, *args: str, cwd: Path | None = None, check: bool = False,
        timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the official ``INFERENCE/script`` in the referee's Python."""
    require(script, python=True)
    return python(str(INFERENCE / script), *args, cwd=cwd, check=check, timeout=timeout)


@functools.lru_cache(maxsize=None)
def _whisper_problem() -> str | None:
    if not WHISPER_PYTHON.is_file():
        return (f"whisper's referee Python is not at {WHISPER_PYTHON}: run `make referee-whisper` "
                "(or set MLPERF_WHISPER_REFEREE_PYTHON)")
    probe = subprocess.run([str(WHISPER_PYTHON), "-c", f"import {', '.join(WHISPER_MODULES)}"],
                           capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return f"whisper's referee Python {WHISPER_PYTHON} lacks a module ({last}): " \
               "run `make referee-whisper`"
    return None


def whisper_python(*args: str, cwd: Path | None = None,
                   timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run whisper's referee Python with ``args`` (nothing of ours on its path); it must
    succeed."""
    reason = _whisper_problem()
    if reason is not None:
        if IN_CI:
            pytest.fail(f"CI must run the official comparison: {reason}", pytrace=False)
        pytest.skip(reason)
    proc = subprocess.run([str(WHISPER_PYTHON), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, PYTHONPATH=""))
    assert proc.returncode == 0, \
        f"{' '.join(args)[:300]} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    return proc


def whisper(script: str, *args: str, cwd: Path | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the official ``INFERENCE/script`` (``speech2text/...``) in whisper's referee
    Python; it must succeed."""
    require(script)
    return whisper_python(str(INFERENCE / script), *args, cwd=cwd, timeout=timeout)
