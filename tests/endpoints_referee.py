"""qwen3-vl's official code for tests: MLCommons' endpoints client (its v6.1 reference) and the
qwen3-vl reference's scorer, run unmodified in a Python 3.12 of their own.

``MLPERF_ENDPOINTS_PYTHON`` names that Python, by default ``.venv-referee-endpoints/bin/python``,
which ``make referee-endpoints`` (part of ``make test``) builds: the endpoints package installed
from a copy of ``../shared/official/endpoints`` and what ``multimodal/qwen3-vl``'s
``evaluation.py`` imports (``tests/referee-endpoints-requirements.txt``). The scripts it runs
are ``tests/endpoints_referee_run.py``'s commands; nothing of mlharness is on its path.

Missing, a comparison is skipped with the reason; under ``CI=true`` it fails instead, and under
``make test`` too when the pinned sources are there but the venv is not (``require``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from extras import extras_required
from referee import IN_CI, INFERENCE, VENVS

ENDPOINTS = INFERENCE.parent / "endpoints"
QWEN3VL_SRC = INFERENCE / "multimodal" / "qwen3-vl" / "src"
VENV = VENVS["endpoints"]
PYTHON = VENV.python
RUNNER = Path(__file__).with_name("endpoints_referee_run.py")


def _sources_problem() -> str | None:
    if not (ENDPOINTS / "pyproject.toml").is_file():
        return f"the pinned endpoints client is not at {ENDPOINTS} (set MLPERF_INFERENCE_DIR)"
    if not (QWEN3VL_SRC / "mlperf_inf_mm_q3vl" / "evaluation.py").is_file():
        return f"the qwen3-vl reference is not at {QWEN3VL_SRC}"
    return None


def require() -> None:
    """Skip unless the endpoints referee can run. Without the pinned sources (a clone that is
    not beside ../shared) it fails only under CI=true, as every official comparison does; with
    them, a venv that is missing or wrong fails under make test too (make test builds it)."""
    reason = _sources_problem()
    if reason is not None:
        if IN_CI:
            pytest.fail(f"CI must run the official comparison: {reason}", pytrace=False)
        pytest.skip(reason)
    reason = VENV.problem()
    if reason is None:
        return
    if extras_required():
        pytest.fail(f"the endpoints referee must run here: {reason}", pytrace=False)
    pytest.skip(reason)


def env(home: Path) -> dict[str, str]:
    """The referee's environment: offline (no Hub), its caches in ``home``, no bytecode written
    beside the pinned sources, the qwen3-vl reference importable."""
    return dict(os.environ, PYTHONPATH=str(QWEN3VL_SRC), PYTHONDONTWRITEBYTECODE="1",
                HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                HF_HOME=str(home / "hf"), HF_DATASETS_CACHE=str(home / "hf" / "datasets"),
                XDG_CACHE_HOME=str(home / "cache"), TQDM_DISABLE="1")


def run(command: str, *args: str, home: Path, cwd: Path | None = None,
        timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``endpoints_referee_run.py COMMAND ARGS`` in the referee's Python; asserts success."""
    require()
    proc = subprocess.run([str(PYTHON), str(RUNNER), command, *args], cwd=cwd or home,
                          env=env(home), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, \
        f"{command} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}"
    return proc


def prepared(catalogue: Path, home: Path) -> str:
    """``catalogue`` in ``home``'s ``datasets`` cache as ``Shopify/product-catalogue`` (what
    the client's ``load_dataset`` finds offline); the cache folder."""
    cache = home / "hf" / "datasets"
    run("cache", str(catalogue), "Shopify/product-catalogue", str(cache), home=home)
    return str(cache)
