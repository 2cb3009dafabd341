"""The official referee for tests: where it is, which Python runs it, and what a missing one does.

One variable names it: ``MLPERF_INFERENCE_DIR``, a checkout of github.com/mlcommons/inference
(never modified); by default ``../shared/official/inference`` beside the repository, the pinned
copy whose README lists what it holds. The BERT ``tokenization`` module the official BERT scripts
import (a git submodule upstream) is ``bert-tokenization/`` beside that folder.

The official scripts run in the referee's own Python, ``MLPERF_REFEREE_PYTHON``, by default
``.venv-referee/bin/python``, which ``make referee`` (part of ``make test``) builds from
``tests/referee-requirements.txt``: they import what mlharness does not (``six``,
``pkg_resources``, ``transformers``) and must not lean on our environment.

Some official scripts need releases that Python cannot hold beside the others; each has a Python
of its own, a :class:`Venv` in ``VENVS``: ``.venv-referee-NAME/bin/python`` (or the variable it
names), which ``make referee-NAME`` (part of ``make test``) builds from
``tests/referee-NAME-requirements.txt``: ``kits19`` (3D-UNet: ``pandas<2``, a SciPy with
``scipy.signal.gaussian``), ``yolo`` (ultralytics on a torch and torchvision that load together),
``whisper`` (openai-whisper's normaliser, which imports torch), ``endpoints`` (Python 3.12:
MLCommons' endpoints client and the qwen3-vl scorer). Mark a test
``@official(..., kits19=True)`` or call ``VENVS[NAME].run(...)``.

A missing piece skips the test with the reason; under ``CI=true`` it fails instead, so CI never
passes without the comparisons. Mark a test ``@official(...)`` (checked before it runs) or call
:func:`require` where the comparison starts, after the test's own checks.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
INFERENCE = Path(os.environ.get("MLPERF_INFERENCE_DIR")
                 or REPO.parent / "shared" / "official" / "inference")
TOKENIZATION = INFERENCE.parent / "bert-tokenization"
REFEREE_PYTHON = Path(os.environ.get("MLPERF_REFEREE_PYTHON")
                      or REPO / ".venv-referee" / "bin" / "python")
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


@dataclass(frozen=True)
class Venv:
    """A referee Python of its own: where it is, what it must import, how a script runs in it."""

    name: str  # make referee-NAME, .venv-referee-NAME, tests/referee-NAME-requirements.txt
    what: str  # as messages name it
    variable: str  # the environment variable that moves it
    modules: tuple[str, ...]  # what it must import
    check: str = ""  # Python that must run after the imports (versions the scripts need)
    env: tuple[tuple[str, str], ...] = ()  # set for every run (never PYTHONPATH: ours stays out)

    @property
    def python(self) -> Path:
        return Path(os.environ.get(self.variable)
                    or REPO / f".venv-referee-{self.name}" / "bin" / "python")

    def problem(self) -> str | None:
        """Why it cannot run (None when it can)."""
        return missing() or _venv_problem(self)

    def require(self) -> None:
        """Skip (fail under CI=true) unless it can run."""
        _skip_or_fail(self.problem())

    def run(self, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        """Run its Python with ``args`` (nothing of ours on its path); with ``check`` it must
        succeed, and a failure shows its output."""
        self.require()
        full = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        full.update(self.env, **(env or {}))
        proc = subprocess.run([str(self.python), *args], cwd=cwd, env=full, capture_output=True,
                              text=True, timeout=timeout)
        assert proc.returncode == 0 or not check, \
            f"{' '.join(args)[:300]} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        return proc


    def run_scripts(self, jobs: list[tuple[Path, list[str], Path | None]], cwd: Path,
                    env: dict[str, str] | None = None,
                    timeout: float = 900) -> subprocess.CompletedProcess[str]:
        """Official scripts, each unmodified, in ONE process of this Python (what they import,
        torch above all, imported once): each ``(folder, [script, *args], stdout_file or
        None)`` in turn, run as ``python script args`` in that folder would run it."""
        payload = json.dumps([(str(c), [str(a) for a in argv], str(out) if out else None)
                              for c, argv, out in jobs])
        return self.run("-c", _RUN_SCRIPTS, payload, cwd=cwd, env=env, timeout=timeout)


#: the runner of Venv.run_scripts: each script as __main__, from its folder, its own argv and
#: sys.path[0], its stdout to a file where one is given
_RUN_SCRIPTS = """
import contextlib, json, os, runpy, sys
for cwd, argv, out in json.loads(sys.argv[1]):
    os.chdir(cwd)
    sys.argv = argv
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    with (open(out, "w") if out else contextlib.nullcontext(sys.stdout)) as f, \\
            contextlib.redirect_stdout(f):
        runpy.run_path(argv[0], run_name="__main__")
"""


@functools.lru_cache(maxsize=None)
def _venv_problem(venv: Venv) -> str | None:
    python = venv.python
    if not python.is_file():
        return (f"{venv.what}'s Python is not at {python}: run `make referee-{venv.name}` "
                f"(or set {venv.variable})")
    code = f"import {', '.join(venv.modules)}" + (f"; {venv.check}" if venv.check else "")
    probe = subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                           timeout=300, env=dict(os.environ, **dict(venv.env)))
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return (f"{venv.what}'s Python {python} is not as tests/referee-{venv.name}-"
                f"requirements.txt says ({last}): run `make referee-{venv.name}`")
    return None


#: the referees with a Python of their own, by name
VENVS = {v.name: v for v in (
    Venv("kits19", "the 3D-UNet referee", "MLPERF_REFEREE_KITS19_PYTHON",
         ("numpy", "scipy.signal", "scipy.ndimage.interpolation", "pandas", "nibabel",
          "onnxruntime", "mlperf_loadgen"),
         check="assert pandas.__version__ < '2' and hasattr(scipy.signal, 'gaussian')"),
    Venv("yolo", "the YOLO referee", "MLPERF_YOLO_PYTHON",
         ("ultralytics", "torchvision.ops", "mlperf_loadgen", "pycocotools", "onnx", "onnxslim"),
         env=(("YOLO_OFFLINE", "1"), ("YOLO_VERBOSE", "false"))),
    Venv("whisper", "whisper's referee", "MLPERF_WHISPER_REFEREE_PYTHON",
         ("numpy", "torch", "whisper.normalizers", "librosa", "soundfile", "sox", "pandas")),
    # MLCommons' endpoints client and the qwen3-vl scorer (tests/endpoints_referee.py)
    Venv("endpoints", "the endpoints referee", "MLPERF_ENDPOINTS_PYTHON",
         ("inference_endpoint", "datasets", "rapidfuzz", "sklearn", "tabulate", "loguru",
          "mlperf_loadgen", "openai")),
)}
#: the 3D-UNet reference's folder under the checkout
KITS19_DIR = "vision/medical_imaging/3d-unet-kits19"


def _skip_or_fail(reason: str | None) -> None:
    if reason is None:
        return
    if IN_CI:
        pytest.fail(f"CI must run the official comparison: {reason}", pytrace=False)
    pytest.skip(reason)


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
        return _venv_problem(VENVS["kits19"])
    return None


def require(*paths: str, python: bool = False, kits19: bool = False) -> None:
    """Skip (fail under CI=true) unless the referee and ``paths`` under it are there."""
    _skip_or_fail(missing(*paths, python=python, kits19=kits19))


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
    gets a link to the official ``meta/`` folder."""
    require(f"{KITS19_DIR}/{script}", kits19=True)
    meta = Path(cwd) / "meta"
    if not meta.exists():
        meta.symlink_to(INFERENCE / KITS19_DIR / "meta")
    return VENVS["kits19"].run(str(INFERENCE / KITS19_DIR / script), *args, cwd=cwd, env=env,
                               check=check, timeout=timeout)


def yolo_python(*args: str, cwd: Path, check: bool = True,
                timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the YOLO referee's Python with ``args`` in ``cwd``: ultralytics offline (no network
    probe), its settings under ``cwd/.ultralytics``."""
    return VENVS["yolo"].run(*args, cwd=cwd, env={"YOLO_CONFIG_DIR": str(cwd / ".ultralytics")},
                             check=check, timeout=timeout)


def whisper_python(*args: str, cwd: Path | None = None,
                   timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run whisper's referee Python with ``args``; it must succeed."""
    return VENVS["whisper"].run(*args, cwd=cwd, timeout=timeout)


def whisper(script: str, *args: str, cwd: Path | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the official ``INFERENCE/script`` (``speech2text/...``) in whisper's referee
    Python; it must succeed."""
    require(script)
    return whisper_python(str(INFERENCE / script), *args, cwd=cwd, timeout=timeout)
