"""Shared fixtures. Tests run the real LoadGen; runs go to a temporary directory."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

TESTS_DIR = Path(__file__).resolve().parent


def _required_import(modname: str, minversion: str | None = None, reason: str | None = None,
                     **kwargs):
    """``pytest.importorskip`` where every extra must be installed (tests/extras.py)."""
    try:
        return _importorskip(modname, minversion, reason, **kwargs)
    except pytest.skip.Exception as exc:
        missing_extra(modname, str(exc))
        raise


# a thread waiting for work sleeps instead of spinning (OpenMP's default spins a while): on two
# cores shared by three test workers a spinning torch pool took the core another test needed
# (training the trained-BERT fixture on two threads was six times slower at load 8). Set before
# any test imports torch; the runs' children inherit it. Nothing the tests check depends on it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# test-only backends/tasks live in tests/ and must import in the run's child process too
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

from extras import extras_required, missing_extra  # noqa: E402 - from TESTS_DIR

if extras_required():
    _importorskip = pytest.importorskip
    pytest.importorskip = _required_import


@pytest.fixture(scope="session", autouse=True)
def own_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A cache of the session's own (tokenised features, compiled models), not the user's
    ``~/.cache/mlharness``, for the tests that name no ``--cache-dir``."""
    # torch.compile's inductor cache (default /tmp/torchinductor_<user>) too: two suites at
    # once on one machine raced in it (a half-written C++ file failed to compile). Inductor
    # keeps its precompiled headers (150 MB a suite) under the temp folder whatever that
    # says, so the session's processes get a temp folder of its own as well: TMPDIR for the
    # runs' children, tempfile's for this one (Ray's folders stay under /tmp: own_ray_folder)
    own = {"MLHARNESS_CACHE": "cache", "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
           "TMPDIR": "tmp"}
    before = {name: os.environ.get(name) for name in own}
    for name, folder in own.items():
        os.environ[name] = str(tmp_path_factory.mktemp(folder))
    tempdir, tempfile.tempdir = tempfile.tempdir, os.environ["TMPDIR"]
    headers = _inductor_header_dir(Path(os.environ["TMPDIR"]))
    yield
    tempfile.tempdir = tempdir
    if headers is not None:
        headers()
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _inductor_header_dir(temp: Path):
    """Point an already imported inductor's precompiled-header folder under ``temp`` (it took
    the temp folder at import); returns what puts it back, or None when inductor is not loaded
    (it then reads the session's temp folder when it is)."""
    codecache = sys.modules.get("torch._inductor.codecache")
    if codecache is None:
        return None
    names = ("_HEADER_DIR", "_HEADER_LOCK_DIR")
    old = {name: getattr(codecache, name) for name in names}
    codecache._HEADER_DIR = str(temp / "torchinductor" / "precompiled_headers")
    codecache._HEADER_LOCK_DIR = str(Path(codecache._HEADER_DIR) / "locks")

    def restore() -> None:
        for name, value in old.items():
            setattr(codecache, name, value)
    return restore


@pytest.fixture(scope="session")
def yolo_world(tmp_path_factory: pytest.TempPathFactory):
    """The YOLO comparisons' model and photographs (``yolo_support.build_world``: ultralytics
    builds a random-weight YOLO11n in the YOLO referee's Python), built once per session for
    the modules of the ``yolo`` group. ``MLHARNESS_YOLO_WORLD=DIR``: a copy of the world
    ``build_world(DIR)`` made earlier (while working on the tests)."""
    import shutil

    import yolo_support

    root = tmp_path_factory.mktemp("yolo")
    earlier = os.environ.get("MLHARNESS_YOLO_WORLD")
    if earlier:
        shutil.copytree(earlier, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns("cache"))
        return yolo_support.YoloWorld(root, root / "model", root / "coco")
    return yolo_support.build_world(root)


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    return tmp_path / "runs"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@official(...)``: the referee must be there (skip with the reason; fail under CI=true)."""
    from referee import require

    # pytest 9.2 moved node ids where pytest-xdist 3.8 writes the group, so every test became its
    # own scope: module fixtures were built on both workers, the power modules met on port 123
    if getattr(item.config.option, "loadgroup", False) and "@" not in item.nodeid:
        pytest.fail("pytest-xdist did not apply the xdist_group marks (--dist loadgroup): use a "
                    "pytest it supports (pyproject.toml pins pytest<9.2)", pytrace=False)
    for mark in item.iter_markers("official"):
        require(*mark.args, **mark.kwargs)


#: modules that share a worker: a fixed resource (the NTP responder on 127.0.0.1:123), or the
#: session's demo runs folder (``store_support.demo_runs``) or whisper's speech and model
#: (``whisper_fixtures.session_data``), then made once instead of per worker
SHARED_GROUPS = {"test_power_e2e": "power", "test_power_faults": "power",
                 "test_power_unit": "power", "test_store": "demo_runs", "test_compare": "demo_runs",
                 "test_report": "demo_runs", "test_yolo_reference": "yolo",
                 "test_yolo_submission": "yolo", "test_whisper_data": "whisper",
                 "test_whisper_run": "whisper", "test_whisper_endpoint": "whisper",
                 "test_whisper_get": "whisper", "test_whisper_compliance": "whisper",
                 "test_whisper_int8": "whisper"}


#: the groups that take longest, longest first (seconds of one worker, measured with
#: ``--durations=0`` on 2 shared cores): handed out first, so the short ones fill in at the end
#: instead of one worker starting a 3-minute module while the other has nothing left
SLOWEST_FIRST = ("test_kits19_reference", "yolo", "whisper", "test_pytorch_backend",
                 "test_reduced_precision",
                 "test_submission_e2e", "test_kits19_submission", "test_kits19_blocks",
                 "test_kits19_compliance", "test_kits19_pytorch",
                 "power", "test_compliance_e2e", "test_llm_submission", "test_llm_compliance",
                 "test_qwen3vl_run", "test_llm_run", "test_llm_demo", "test_openvino_backend",
                 "test_catalogue_faults", "test_qwen3vl_data", "test_qwen3vl_endpoints",
                 "test_llm_real_server", "test_llm_tune", "test_qwen3vl_tune",
                 "test_endpoints_format", "test_llm_results",
                 "test_tune", "test_calibrate", "test_e2e_demo", "test_distributed", "demo_runs",
                 "test_compliance_checker", "test_ray", "test_bert_e2e", "test_typed_config")


def group_of(item: pytest.Item) -> str:
    module = item.module.__name__ if item.module else item.nodeid
    return SHARED_GROUPS.get(module, module)


@pytest.hookimpl(tryfirst=True)  # before xdist's hook, which reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under ``pytest -n N --dist loadgroup`` (``make test``) each module runs on one worker, so
    its module-scoped fixtures are built once; the power modules share a worker. The slowest
    groups come first (with ``--no-loadscope-reorder`` xdist hands groups out in this order)."""
    rank = {group: n for n, group in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(group_of(item), len(rank)))  # stable: order kept within
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of(item)))
