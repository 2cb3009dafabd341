"""The official referee for tests: where it is, which Python runs it, and what a missing one does.

One variable names it: ``MLPERF_INFERENCE_DIR``, a checkout of github.com/mlcommons/inference
(never modified); by default ``../shared/official/inference`` beside the repository, the pinned
copy whose README lists what it holds. The BERT ``tokenization`` module the official BERT scripts
import (a git submodule upstream) is ``bert-tokenization/`` beside that folder.

The official scripts run in the referee's own Python, ``MLPERF_REFEREE_PYTHON``, by default
``.venv-referee/bin/python``, which ``make referee`` (part of ``make test``) builds from
``tests/referee-requirements.txt``: they import what mlharness does not (``six``,
``pkg_resources``, ``transformers``) and must not lean on our environment.

The 3D-UNet scripts (``vision/medical_imaging/3d-unet-kits19/``) need releases the shared
referee cannot hold beside its numpy 2 (``pandas<2``, a SciPy with ``scipy.signal.gaussian``):
they run in their own Python, ``MLPERF_REFEREE_KITS19_PYTHON``, by default
``.venv-referee-kits19/bin/python``, which ``make referee-kits19`` (part of ``make test``) builds
from ``tests/referee-kits19-requirements.txt``; mark such tests ``@official(..., kits19=True)``.

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
KITS19_PYTHON = Path(os.environ.get("MLPERF_REFEREE_KITS19_PYTHON")
                     or REPO / ".venv-referee-kits19" / "bin" / "python")
#: what the 3D-UNet scripts import (see referee-kits19-requirements.txt)
KITS19_MODULES = ("numpy", "scipy.signal", "scipy.ndimage.interpolation", "pandas", "nibabel",
                  "onnxruntime", "mlperf_loadgen")
#: the 3D-UNet reference's folder under the checkout
KITS19_DIR = "vision/medical_imaging/3d-unet-kits19"
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


@functools.lru_cache(maxsize=None)
def _kits19_problem() -> str | None:
    if not KITS19_PYTHON.is_file():
        return (f"the 3D-UNet referee's Python is not at {KITS19_PYTHON}: run `make "
                "referee-kits19` (or set MLPERF_REFEREE_KITS19_PYTHON)")
    probe = subprocess.run(
        [str(KITS19_PYTHON), "-c",
         f"import {', '.join(KITS19_MODULES)}; import pandas, scipy.signal; "
         "assert pandas.__version__ < '2' and hasattr(scipy.signal, 'gaussian')"],
        capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return (f"the 3D-UNet referee's Python {KITS19_PYTHON} is not as "
                f"tests/referee-kits19-requirements.txt says ({last}): run `make referee-kits19`")
    return None


def missing(*paths: str, python: bool = False, kits19: bool = False) -> str | None:
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
    if kits19:
        return _kits19_problem()
    return None


def require(*paths: str, python: bool = False, kits19: bool = False) -> None:
    """Skip (fail under CI=true) unless the referee and ``paths`` under it are there."""
    reason = missing(*paths, python=python, kits19=kits19)
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


def kits19_run(script: str, *args: str, cwd: Path, env: dict[str, str] | None = None,
               timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the official ``KITS19_DIR/script`` unmodified in the 3D-UNet referee's Python.

    The scripts read ``meta/*.json`` from the working directory (``global_vars.py``): ``cwd``
    gets a link to the official ``meta/`` folder. Fails with the output when the script does.
    """
    require(f"{KITS19_DIR}/{script}", kits19=True)
    meta = Path(cwd) / "meta"
    if not meta.exists():
        meta.symlink_to(INFERENCE / KITS19_DIR / "meta")
    full_env = dict(os.environ, **(env or {}))
    full_env.pop("PYTHONPATH", None)  # nothing of ours on its path
    proc = subprocess.run([str(KITS19_PYTHON), str(INFERENCE / KITS19_DIR / script), *args],
                          cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0 or not check, \
        f"{script} {' '.join(args)[:300]} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    return proc
