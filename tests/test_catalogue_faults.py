"""Fault catalogue: backends that hang, raise or die in every phase, and signals to `mlharness run`.

Each case asserts the exit code, one clear line without a traceback, the run's record, that the
worker is gone, and that nothing outside the run directory changed. The cases that wait out a
stall timeout or a slow load run side by side (``waited_out``): they wait, they do not compute.
"""

from __future__ import annotations

import json
import signal
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from catalogue_support import Outcome, alive, children, cli_subprocess, run_cli, snapshot
from distributed_support import wait_until

#: the stall timeout of the cases that wait for it (or for a load longer than it): long enough
#: that the phases before the hang never reach it while eight runs start side by side
STALL = "6"


def _only_run(runs: Path) -> Path:
    found = [p.parent for p in runs.rglob("run.json")]
    assert len(found) == 1, found
    return found[0]


FAULTS = [
    # (id, backend, env, exit code, fragment of the one-line message)
    ("load-hangs", "faulty_backends:HangingLoadBackend", {}, 3,
     f"no progress while loading the model for {STALL} s"),
    ("load-raises", "faulty_backends:RaisingLoadBackend", {}, 3,
     "injected failure while loading the model"),
    ("load-exits", "faulty_backends:ExitingLoadBackend", {}, 3,
     "worker process died (exit code 134)"),
    ("predict-raises", "faulty_backends:FailingBackend", {"FAIL_ON_BATCH": "1"}, 3,
     "the backend failed while warming up: RuntimeError: injected failure on batch 1"),
    ("predict-hangs", "faulty_backends:StallingBackend", {}, 3,
     f"no sample loaded or completed for {STALL} s"),
    ("predict-exits", "faulty_backends:DyingBackend", {}, 3, "worker process died"),
    ("predict-segfaults", "faulty_backends:SegfaultingBackend", {}, 3,
     "worker process died (signal 11) in faulty_backends:SegfaultingBackend fp32 while "
     "running the LoadGen test, image [1, 1, 8, 8] in flight; the Python stack of each "
     "thread is in"),
    ("backend-not-importable", "faulty_backends:NoSuchBackend", {}, 2,
     "cannot load backend"),
]


TASK_FAULTS = [
    # (id, -b task, exit code, fragment): the dataset phases in the worker
    ("dataset-index-hangs", "faulty_tasks:hanging_index", 3,
     f"no progress while loading the dataset for {STALL} s"),
    ("sample-loading-hangs", "faulty_tasks:hanging_samples", 3,
     f"no progress while loading samples for the warm-up for {STALL} s"),
    ("sample-loading-hangs-no-warmup", "faulty_tasks:hanging_samples", 3,
     f"no sample loaded or completed for {STALL} s"),
    ("scoring-raises", "faulty_tasks:raising_score", 3,
     "scoring failed: ZeroDivisionError: injected failure while scoring"),
]
CASES = [(*c, "demo") for c in FAULTS] + \
        [(c[0], "onnxruntime", {}, c[2], c[3], c[1]) for c in TASK_FAULTS]
#: the cases that end only by the stall timeout
HANGS = [c for c in CASES if "hangs" in c[0]]


def _fault_argv(case: tuple) -> list[str]:
    """`mlharness run` for one case of CASES, in the current folder."""
    name, backend, _, _, _, benchmark = case
    # SingleStream issues one sample at a time: a predict that hangs on the 2nd batch is seen
    mode = (["--mode", "accuracy", "--max-samples", "20"] if "score" in benchmark
            else ["--min-duration", "500"])
    if name.endswith("-no-warmup"):  # LoadGen's own sample loading
        mode += ["--warmup", "0"]
    return ["run", "-b", benchmark, "-s", "SingleStream", "--backend", backend,
            "--stall-timeout", STALL, "--output-dir", "runs", *mode, "--no-progress"]


@dataclass
class Ended:
    """A case's CLI run: what it said, how long it took, its folder and the folder before."""

    result: Outcome
    took: float
    root: Path
    before: dict[str, tuple[int, int]]


def _scratch(root: Path) -> dict[str, tuple[int, int]]:
    root.mkdir(parents=True, exist_ok=True)
    (root / "keep.txt").write_text("untouched")
    return snapshot(root)


def _cli_in_subprocess(root: Path, argv: list[str]) -> Ended:
    before = _scratch(root)
    started = time.monotonic()
    proc = cli_subprocess(argv, cwd=root)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return Ended(Outcome(proc.returncode, out, err), time.monotonic() - started, root, before)


def _execute(root: Path, backend: str, **spec: Any) -> tuple[Any, list]:
    """``execute()`` of the demo (Offline) with ``backend``: its outcome and progress events."""
    from mlharness.runner import execute
    from mlharness.spec import RunSpec

    events: list = []
    outcome = execute(RunSpec(benchmark="demo", scenario="Offline", target_qps=100,
                              backend=backend, stall_timeout=float(STALL),
                              output_dir=root / "runs", **spec), progress=events.append)
    return outcome, events


@pytest.fixture(scope="module")
def waited_out(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Future]:
    """The runs that wait out the stall timeout or a slow load, side by side (each in a folder
    of its own, the CLI ones as processes of their own) and awaited before any other test of the
    module runs: case id -> its Future. Each starts once the one before wrote its run.json (its
    worker starting), so at most two start at once and their phases before the wait stay well
    inside the stall timeout however busy the machine is."""
    root = tmp_path_factory.mktemp("waited")
    jobs: dict[str, Callable[[], Any]] = {
        "slow-load": lambda: _execute(root / "slow-load", "faulty_backends:SlowLoadingBackend"),
        "busy-load": lambda: _execute(root / "busy-load", "faulty_backends:BusyLoadingBackend"),
        "slow-instances": lambda: _execute(
            root / "slow-instances", "faulty_backends:SlowInstanceBackend", instances=3,
            threads_per_instance=1),
        **{case[0]: (lambda case=case: _cli_in_subprocess(root / case[0], _fault_argv(case)))
           for case in HANGS}}
    futures: dict[str, Future] = {}
    with ThreadPoolExecutor(len(jobs)) as pool:
        for name, job in jobs.items():
            futures[name] = future = pool.submit(job)
            wait_until(lambda f=future, folder=root / name: f.done() or any(
                folder.rglob("run.json")), 120, f"{name} to start its worker")
    return futures  # leaving the with block waited for every run


def _run_here(case: tuple, tmp_path: Path, capsys, monkeypatch) -> Ended:
    """A case that ends by itself: the CLI in this process."""
    for key, value in case[2].items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    before = _scratch(tmp_path)
    started = time.monotonic()
    result = run_cli(_fault_argv(case), capsys)
    return Ended(result, time.monotonic() - started, tmp_path, before)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_faulty_backend_ends_the_run_cleanly(case, tmp_path: Path, capsys, monkeypatch,
                                             request: pytest.FixtureRequest):
    name, _, _, code, fragment, _ = case
    ended = (request.getfixturevalue("waited_out")[name].result() if case in HANGS
             else _run_here(case, tmp_path, capsys, monkeypatch))
    result = ended.result
    text = result.out + result.err
    assert result.code == code, text
    assert "Traceback" not in text
    assert fragment in text, text
    assert ended.took < 60, ended.took  # bounded: the stall timeout plus start-up, never for ever
    run_dir = _only_run(ended.root / "runs")
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == ("failed" if code == 3 else "error")
    assert (run_dir / "user.conf").is_file()  # partial run directory kept
    crash_log = run_dir / "worker_crash.txt"  # faulthandler's stacks: kept only for a crash
    if "segfaults" in name:
        assert "in predict" in crash_log.read_text() and record["error"]["crash_log"]
    else:
        assert not crash_log.exists()
    assert snapshot(ended.root, skip=("runs",)) == ended.before


def test_the_default_stall_timeout_is_the_documented_60_s(capsys) -> None:
    """The cases above give a short --stall-timeout; without one a run waits 60 s
    (docs/reliability.md, `run --help`), read from the parsed spec instead of waited for."""
    from mlharness.cli.main import build_parser
    from mlharness.cli.run import given_spec

    spec, _ = given_spec(build_parser().parse_args(["run", "-b", "demo"]))
    assert spec.stall_timeout == 60.0
    shown = run_cli(["run", "--help"], capsys)
    assert shown.code == 0 and "nothing completes for this many seconds (default 60)" in \
        " ".join(shown.out.split())


def test_a_load_the_backend_allows_for_is_not_a_stall(waited_out: dict[str, Future]) -> None:
    """8 s of loading against a 6 s stall timeout: the backend's load_allowance_s (torch.compile
    uses it) keeps the stall clock from ending the run; the progress line says it compiles."""
    outcome, events = waited_out["slow-load"].result()
    assert outcome.status == "ok", outcome.record.error  # the verdict depends on the machine
    assert "loading and compiling the model" in [e.label for e in events if e.phase == "start"]


def test_a_load_that_computes_is_not_a_stall(waited_out: dict[str, Future]) -> None:
    """7 s of computing at load against a 6 s stall timeout, no allowance asked: the worker's
    CPU time grows, so it is setting up, not stalled (importing transformers took over a minute
    on a busy machine and ended real runs). The hanging loads above sleep: still stalls."""
    outcome, _ = waited_out["busy-load"].result()
    assert outcome.status == "ok", outcome.record.error


def test_loading_several_instances_is_not_a_stall(waited_out: dict[str, Future]) -> None:
    """Three instances of 2.5 s each against a 6 s stall timeout: each instance's load is
    progress (before, the three were one phase of 7.5 s, and 16 instances of a large model
    failed the run as stalled); the progress line names the instance being loaded."""
    outcome, events = waited_out["slow-instances"].result()
    assert outcome.status == "ok", outcome.record.error
    assert outcome.record.sut is not None and outcome.record.sut.placement is not None
    assert outcome.record.sut.placement["instances"] == 3
    shown = [e.label for e in events if e.phase == "start"]
    assert shown[0] == "starting the worker"
    assert [f"loading the model (instance {k} of 3)" for k in (1, 2, 3)] == \
        [label for label in shown if label.startswith("loading the model")]


def test_loadgen_building_its_queries_is_not_a_stall(tmp_path: Path, capsys) -> None:
    """LoadGen builds every query before issuing the first (2 x 3 s / 0.001 ms = 6 M queries,
    5 to 8 s here beside other work): longer than a 4 s stall timeout, yet progress, not a
    stall. Its own stall timeout: the waited-out cases' 6 s could outlast the build."""
    result = run_cli(["run", "-b", "demo", "-s", "SingleStream", "--target-latency", "0.001",
                      "--min-duration", "3000", "--stall-timeout", "4", "--no-progress",
                      "--output-dir", str(tmp_path / "runs")], capsys)
    text = result.out + result.err
    assert "stalled" not in text and result.code in (0, 1), text
    record = json.loads((_only_run(tmp_path / "runs") / "run.json").read_text())
    assert record["status"] == "ok"


SIGNALS = [("SIGTERM", signal.SIGTERM), ("SIGHUP", signal.SIGHUP), ("SIGINT", signal.SIGINT)]


def _start_long_run(root: Path, *argv: str):
    root.mkdir()
    (root / "keep.txt").write_text("untouched")
    run = argv or ("-b", "demo", "--backend", "faulty_backends:SlowNoopBackend",
                   "--target-qps", "100", "--min-duration", "60000")
    return cli_subprocess(["run", *run, "--output-dir", "runs", "--no-progress"], cwd=root)


def _logging(root: Path) -> bool:
    return any((root / "runs").rglob("mlperf_log_detail.txt"))


@pytest.mark.slow
def test_signals_end_the_worker_record_interrupted_and_exit_128_plus_n(tmp_path: Path):
    """SIGTERM, SIGHUP, SIGINT (run in parallel) and SIGKILL of the parent."""
    cases = {name: (sig, _start_long_run(tmp_path / name)) for name, sig in SIGNALS}
    killed_root = tmp_path / "SIGKILL"
    killed = _start_long_run(killed_root)
    scoring_root = tmp_path / "scoring"  # SIGTERM while the parent scores the accuracy log
    scoring = _start_long_run(scoring_root, "-b", "faulty_tasks:slow_score", "--mode",
                              "accuracy", "--max-samples", "20")
    try:
        for name in cases:
            wait_until(lambda folder=tmp_path / name: _logging(folder), 120,
                       f"{name} run to start LoadGen")
        wait_until(lambda: _logging(killed_root), 120, "SIGKILL run to start LoadGen")
        wait_until(lambda: (scoring_root / "scoring.started").exists(), 120, "scoring to start")
        scoring.send_signal(signal.SIGTERM)
        out, err = scoring.communicate(timeout=60)
        assert scoring.returncode == 143 and "Traceback" not in out + err, err
        record = json.loads((_only_run(scoring_root / "runs") / "run.json").read_text())
        assert (record["status"], record["error"]["message"]) == ("interrupted",
                                                                  "interrupted by SIGTERM")
        workers = {name: children(proc.pid) for name, (_, proc) in cases.items()}
        orphans = children(killed.pid)
        assert all(workers.values()) and orphans
        for sig, proc in cases.values():
            proc.send_signal(sig)
        killed.kill()
        for name, (sig, proc) in cases.items():
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 128 + sig, (name, proc.returncode, err)
            assert "Traceback" not in err + out
            assert f"interrupted by {name}" in err
            run_dir = _only_run(tmp_path / name / "runs")
            record = json.loads((run_dir / "run.json").read_text())
            assert record["status"] == "interrupted"
            assert record["error"]["message"] == f"interrupted by {name}"
            assert (run_dir / "mlperf_log_detail.txt").is_file()  # logs kept
            assert (tmp_path / name / "keep.txt").read_text() == "untouched"
            for pid in workers[name]:
                wait_until(lambda pid=pid: not alive(pid), 10, f"{name} worker {pid} to end")
        killed.communicate(timeout=30)
        for pid in orphans:  # the worker notices its parent is gone
            wait_until(lambda pid=pid: not alive(pid), 5, f"orphaned worker {pid} to end")
        # the killed run's record is never trusted
        from mlharness.record import read_record, untrusted_reason

        run_dir = _only_run(killed_root / "runs")
        record = read_record(run_dir)
        assert record.status == "running"
        assert "process that died" in untrusted_reason(run_dir, record)
    finally:
        for _, proc in [*cases.values(), (None, killed), (None, scoring)]:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
