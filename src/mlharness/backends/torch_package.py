"""Compiled models kept on disk: an AOTInductor package of a model (``torch.export`` then
``torch._inductor.aoti_compile_and_package``), built the first time a model is compiled on a
machine and loaded in seconds by every later run, tune probe and instance.

A package is named by what it was built from: the model file's bytes (sha256), what the backend
derived from it (architecture, precision, BERT config), the torch and torchao versions and this
CPU's instruction sets (inductor generates code for them). A changed or recalibrated model,
another torch or another CPU therefore never meets a stale package; it builds its own. A package
holds the frozen weights (inductor's freezing: oneDNN-packed weights; a PT2E program's int8
kernels) and serves every batch size through one dynamic batch axis (and BERT's sequence axis),
so a Server run compiles once, not a batch of one apart. A package is built in a process of
its own, so the run that builds it holds no more memory afterwards than one that loads it. A
package that fails to load (a truncated file) is built again; a build that is killed leaves no
package, and what it left is removed by the next build. A package is run by
:class:`torch_package_runner.PackageRunner`, with its weights moved to aligned memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from mlharness.backends.torch_package_runner import PackageRunner, libraries
from mlharness.children import ChildDied, call_in_child
from mlharness.errors import ConfigError, ModelError, one_line
from mlharness.files import sha256_file
from mlharness.hostinfo import cpu_flags, package_versions

#: bump when what goes into a package changes
PACKAGE_VERSION = 1
#: the packages' folder under the cache root (``--cache-dir``, ``$MLHARNESS_CACHE``)
FOLDER = "torch-packages"
#: a build in progress: this, then the builder's host and pid
BUILDING = ".building-"
#: the build's process, as errors name it
BUILDER = "package build"
#: environment settings that change the vector instructions inductor generates code for
#: (``torch/_inductor/cpu_vec_isa.py``, ``torch/_inductor/config.py``)
VECTOR_SETTINGS = ("ATEN_CPU_CAPABILITY", "TORCHINDUCTOR_VEC_ISA_OK")


@dataclass
class Package:
    """A loaded package: ``runner(*tensors)`` runs the model."""

    runner: PackageRunner
    path: Path
    built_s: float | None  # seconds it took to build here; None: loaded from the cache

    def describe(self) -> dict[str, Any]:
        return {"path": str(self.path), "from_cache": self.built_s is None,
                "built_s": None if self.built_s is None else round(self.built_s, 1),
                "aligned_weights": self.runner.aligned,
                "weights_not_moved": self.runner.not_moved}

    def note(self) -> str:
        """For the user, under the result: where the compiled model is, and what it saves."""
        if self.built_s is None:
            return f"the compiled model was loaded from {self.path}"
        size = self.path.stat().st_size / 1e6 if self.path.is_file() else 0.0
        return (f"the model was compiled in {self.built_s:.0f} s into {self.path} ({size:,.0f} MB); "
                "later runs with package=true load it from there")


def package_path(root: Path, model: Path, derived: dict[str, Any]) -> Path:
    """Where the package of ``model`` (with what the backend ``derived`` from it) lives."""
    import torch

    # inductor picks its vector instructions from the CPU's flags unless these settings cap
    # them (asking inductor itself costs 3-4 s a load: its import, and a test compile)
    facts = {"version": PACKAGE_VERSION, "model": sha256_file(model), "derived": derived,
             "torch": torch.__version__, "torchao": package_versions(("torchao",)).get("torchao"),
             "cpu": sorted(cpu_flags()),
             "isa_settings": {k: os.environ.get(k) for k in VECTOR_SETTINGS}}
    key = hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()
    return Path(root) / FOLDER / f"{Path(model).stem}-{key[:24]}.pt2"


def load_or_build(path: Path, export: Callable[[], Any], runners: int) -> Package:
    """The package at ``path``, else the program ``export()`` returns, compiled into it first
    in a child process (``export`` picklable: it runs there), whose memory (the exported
    program, inductor's compile state: BERT-large 2.6 GB beyond what a loaded package holds)
    goes back when it ends; ``runners``: how many threads may run it at once (``--instances``)."""
    if path.is_file():
        try:
            return Package(_load(path, runners), path, None)
        except Exception:  # a truncated or foreign file: built again below
            path.unlink(missing_ok=True)
    started = time.perf_counter()
    try:
        call_in_child(_build, path, export, name=BUILDER)
    except ChildDied as exc:
        _drop_killed_builds(path.parent)  # what it left
        raise ModelError(f"compiling the model failed: {exc}",
                         hint="drop --backend-option package=true") from None
    try:
        runner = _load(path, runners)
    except Exception as exc:  # torch raises assorted types
        raise ModelError(f"the compiled package {path} does not load: {one_line(exc)}",
                         hint="drop --backend-option package=true") from exc
    return Package(runner, path, time.perf_counter() - started)


def _load(path: Path, runners: int) -> PackageRunner:
    return PackageRunner(path, runners)


def _build(path: Path, export: Callable[[], Any]) -> None:
    """Runs in the build's own process."""
    import torch

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot keep compiled models in {path.parent}: {exc.strerror}",
                          hint="pass a writable --cache-dir") from exc
    _drop_killed_builds(path.parent)
    building = path.parent / _building_name(os.getpid())  # the package's own name inside
    partial = building / path.name
    try:
        building.mkdir(exist_ok=True)
        # freezing (weights as constants, int8 patterns as kernels) applies without autograd only
        with torch.no_grad():
            program = export()
            torch._inductor.aoti_compile_and_package(
                program, package_path=str(partial), inductor_configs={"freezing": True})
        _drop_build_files(partial)
        os.replace(partial, path)  # whole, or not there: a killed build leaves no package
    except (ConfigError, ModelError):
        raise
    except Exception as exc:  # export and inductor raise assorted types
        raise ModelError(f"compiling the model failed: {one_line(exc)}",
                         hint="drop --backend-option package=true") from exc
    finally:
        shutil.rmtree(building, ignore_errors=True)


def _building_name(pid: int) -> str:
    return f"{BUILDING}{socket.gethostname()}-{pid}"


def _drop_killed_builds(folder: Path) -> None:
    """What builds on this host left that were killed before they could clean up (their
    process is gone); another host's (a cache on a shared file system) is not judged here."""
    for stale in folder.glob(f"{_building_name(0)[:-1]}*"):
        pid = stale.name.rpartition("-")[2]
        if pid.isdigit() and stale.name == _building_name(int(pid)) and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def _drop_build_files(package: Path) -> None:
    """Inductor leaves the library it packaged in its own cache (``/tmp/torchinductor_$USER``),
    weights included (BERT-large: 1.3 GB a build); the package holds it, so it goes."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    with zipfile.ZipFile(package) as archive:
        names = {Path(n).name for n in libraries(archive)}
    for name in names:
        for library in Path(cache_dir()).glob(f"*/{name}"):
            shutil.rmtree(library.parent, ignore_errors=True)
