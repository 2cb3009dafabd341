"""Fault catalogue: backends that hang, raise or die in every phase, and signals to `mlharness run`.

Each case asserts the exit code, one clear line without a traceback, the run's record, that the
worker is gone, and that nothing outside the run directory changed.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from catalogue_support import alive, children, cli_subprocess, run_cli, snapshot

STALL = "4"


def _only_run(runs: Path) -> Path:
    found = [p.parent for p in runs.rglob("run.json")]
    assert len(found) == 1, found
    return found[0]


FAULTS = [
    # (id, backend, env, exit code, fragment of the one-line message)
    ("load-hangs", "faulty_backends:HangingLoadBackend", {}, 3,
     "no progress while loading the model for 4 s"),
    ("load-raises", "faulty_backends:RaisingLoadBackend", {}, 3,
     "injected failure while loading the model"),
    ("load-exits", "faulty_backends:ExitingLoadBackend", {}, 3,
     "worker process died (exit code 134)"),
    ("predict-raises", "faulty_backends:FailingBackend", {"FAIL_ON_BATCH": "1"}, 3,
     "the backend failed while warming up: RuntimeError: injected failure on batch 1"),
    ("predict-hangs", "faulty_backends:StallingBackend", {}, 3,
     "no sample loaded or completed for 4 s"),
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
     "no progress while loading the dataset for 4 s"),
    ("sample-loading-hangs", "faulty_tasks:hanging_samples", 3,
     "no progress while loading samples for the warm-up for 4 s"),
    ("sample-loading-hangs-no-warmup", "faulty_tasks:hanging_samples", 3,
     "no sample loaded or completed for 4 s"),
    ("scoring-raises", "faulty_tasks:raising_score", 3,
     "scoring failed: ZeroDivisionError: injected failure while scoring"),
]
CASES = [(*c, "demo") for c in FAULTS] + \
        [(c[0], "onnxruntime", {}, c[2], c[3], c[1]) for c in TASK_FAULTS]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_faulty_backend_ends_the_run_cleanly(case, tmp_path: Path, capsys, monkeypatch):
    _, backend, env, code, fragment, benchmark = case
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("untouched")
    before = snapshot(tmp_path)
    started = time.monotonic()
    # SingleStream issues one sample at a time: a predict that hangs on the 2nd batch is seen
    mode = (["--mode", "accuracy", "--max-samples", "20"] if "score" in benchmark
            else ["--min-duration", "500"])
    if case[0].endswith("-no-warmup"):  # LoadGen's own sample loading
        mode += ["--warmup", "0"]
    result = run_cli(["run", "-b", benchmark, "-s", "SingleStream", "--backend", backend,
                      "--stall-timeout", STALL, "--output-dir", "runs", *mode,
                      "--no-progress"], capsys)
    took = time.monotonic() - started
    text = result.out + result.err
    assert result.code == code, text
    assert "Traceback" not in text
    assert fragment in text, text
    assert took < 60, took  # bounded: the stall timeout plus start-up, never for ever
    run_dir = _only_run(tmp_path / "runs")
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == ("failed" if code == 3 else "error")
    assert (run_dir / "user.conf").is_file()  # partial run directory kept
    crash_log = run_dir / "worker_crash.txt"  # faulthandler's stacks: kept only for a crash
    if "segfaults" in case[0]:
        assert "in predict" in crash_log.read_text() and record["error"]["crash_log"]
    else:
        assert not crash_log.exists()
    after = snapshot(tmp_path, skip=("runs",))
    assert after == {k: v for k, v in before.items()}


def test_a_load_the_backend_allows_for_is_not_a_stall(tmp_path: Path) -> None:
    """6 s of loading against a 4 s stall timeout: the backend's load_allowance_s (torch.compile
    uses it) keeps the stall clock from ending the run; the progress line says it compiles."""
    from mlharness.runner import execute
    from mlharness.spec import RunSpec

    events: list = []
    outcome = execute(RunSpec(benchmark="demo", scenario="Offline", target_qps=100,
                              backend="faulty_backends:SlowLoadingBackend",
                              stall_timeout=float(STALL), output_dir=tmp_path / "runs"),
                      progress=events.append)
    assert outcome.status == "ok", outcome.record.error  # the verdict depends on the machine
    assert "loading and compiling the model" in [e.label for e in events if e.phase == "start"]


def test_loading_several_instances_is_not_a_stall(tmp_path: Path) -> None:
    """Three instances of 2.5 s each against a 4 s stall timeout: each instance's load is
    progress (before, the three were one phase of 7.5 s, and 16 instances of a large model
    failed the run as stalled); the progress line names the instance being loaded."""
    from mlharness.runner import execute
    from mlharness.spec import RunSpec

    events: list = []
    outcome = execute(RunSpec(benchmark="demo", scenario="Offline", target_qps=100,
                              backend="faulty_backends:SlowInstanceBackend", instances=3,
                              threads_per_instance=1, stall_timeout=float(STALL),
                              output_dir=tmp_path / "runs"), progress=events.append)
    assert outcome.status == "ok", outcome.record.error
    assert outcome.record.sut["placement"]["instances"] == 3
    shown = [e.label for e in events if e.phase == "start"]
    assert shown[0] == "starting the worker"
    assert [f"loading the model (instance {k} of 3)" for k in (1, 2, 3)] == \
        [label for label in shown if label.startswith("loading the model")]


def test_loadgen_building_its_queries_is_not_a_stall(tmp_path: Path, capsys) -> None:
    """LoadGen builds every query before issuing the first (2 x 3 s / 0.001 ms = 6 M queries,
    about 10 s here): longer than the 4 s stall timeout, yet progress, not a stall."""
    result = run_cli(["run", "-b", "demo", "-s", "SingleStream", "--target-latency", "0.001",
                      "--min-duration", "3000", "--stall-timeout", STALL, "--no-progress",
                      "--output-dir", str(tmp_path / "runs")], capsys)
    text = result.out + result.err
    assert "stalled" not in text and result.code in (0, 1), text
    record = json.loads((_only_run(tmp_path / "runs") / "run.json").read_text())
    assert record["status"] == "ok"


SIGNALS = [("SIGTERM", signal.SIGTERM), ("SIGHUP", signal.SIGHUP), ("SIGINT", signal.SIGINT)]


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


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
        for name, (sig, proc) in cases.items():
            _wait_for(lambda: _logging(tmp_path / name), 120, f"{name} run to start LoadGen")
        _wait_for(lambda: _logging(killed_root), 120, "SIGKILL run to start LoadGen")
        _wait_for(lambda: (scoring_root / "scoring.started").exists(), 120, "scoring to start")
        scoring.send_signal(signal.SIGTERM)
        out, err = scoring.communicate(timeout=60)
        assert scoring.returncode == 143 and "Traceback" not in out + err, err
        record = json.loads((_only_run(scoring_root / "runs") / "run.json").read_text())
        assert (record["status"], record["error"]["message"]) == ("interrupted",
                                                                  "interrupted by SIGTERM")
        workers = {name: children(proc.pid) for name, (_, proc) in cases.items()}
        orphans = children(killed.pid)
        assert all(workers.values()) and orphans
        for name, (sig, proc) in cases.items():
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
                _wait_for(lambda: not alive(pid), 10, f"{name} worker {pid} to end")
        killed.communicate(timeout=30)
        for pid in orphans:  # the worker notices its parent is gone
            _wait_for(lambda: not alive(pid), 5, f"orphaned worker {pid} to end")
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
