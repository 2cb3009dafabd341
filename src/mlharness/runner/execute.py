"""Execute one run: prepare the task, start the test in a child process, watch it, score it.

The parent never imports LoadGen. It watches the child through a message queue and two shared
counters, so it can show progress and end the run when the backend fails (``FAILURE_GRACE_S``),
the child dies, or nothing moves for ``spec.stall_timeout_s``. The stall clock runs from the
moment the child starts: starting, dataset loading, model loading and the LoadGen test are
phases the child announces, and each must show progress within the stall timeout. The child
watches its parent and exits when the parent is gone. Partial logs are always kept; an
interrupted run (SIGINT, SIGTERM, SIGHUP) is recorded as ``"interrupted"``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from mlharness.errors import HarnessError, RunFailed
from mlharness.loadgen.mllog import LoadGenResult, parse_run_logs, read_accuracy_log
from mlharness.loadgen.settings import TEST_MIN_DURATION_MS, TestConfig, render_user_conf
from mlharness.files import write_json_atomic, write_text_atomic
from mlharness.hostinfo import describe_system, package_versions
from mlharness.runner.record import RUN_FORMAT, owner_fields
from mlharness.runner.rundir import new_run_dir, now_iso
from mlharness.runner.worker import child_main, task_options
from mlharness.spec import RunSpec
from mlharness.store import git_commit_of, record_run
from mlharness.tasks import AccuracyResult, Task, create_task

FAILURE_GRACE_S = 10.0  # after a backend failure, LoadGen gets this long to finish by itself
VALID_MIN_DURATION_MS = 600_000  # loadgen/mlperf.conf: *.<scenario>.min_duration


@dataclass
class RunProgress:
    """What the CLI needs to draw progress. ``total`` is None for time-bound phases."""

    phase: str  # prepare | start | load | run | score
    done: int = 0
    total: int | None = None
    elapsed_s: float = 0.0
    expected_s: float | None = None
    label: str = ""


ProgressSink = Callable[[RunProgress], None]


@dataclass
class RunRecord:
    run_dir: Path
    status: str  # ok | failed | error | interrupted
    data: dict[str, Any] = field(default_factory=dict)
    result: LoadGenResult | None = None
    accuracy: AccuracyResult | None = None

    @property
    def exit_code(self) -> int:
        """0 ok, 1 INVALID or accuracy below target, 3 the run failed."""
        if self.status != "ok":
            return 3
        if self.result is not None and self.result.mode == "performance" and not self.result.valid:
            return 1
        if self.result is not None and self.result.errors:
            return 1
        if self.accuracy is not None and self.accuracy.passed is False:
            return 1
        return 0


def expected_duration_s(cfg: TestConfig) -> float:
    ms = cfg.min_duration_ms
    if ms is None:
        ms = TEST_MIN_DURATION_MS if cfg.short else VALID_MIN_DURATION_MS
    return ms / 1000.0


def expected_samples(cfg: TestConfig, task: Task) -> int | None:
    """Samples the test will issue when that is known up front (accuracy, Offline)."""
    if cfg.mode == "accuracy":
        return task.total_count()
    if cfg.scenario == "Offline":
        qps = cfg.target_qps or 1.0
        floor = cfg.min_query_count or 1  # mlperf.conf's count is not known out here
        # loadgen/test_settings_internal.cc: samples_per_query = max(min_query_count, 1.1*dur*qps)
        return max(floor, int(1.1 * expected_duration_s(cfg) * qps))
    return None


class _Watch:
    """Parent-side state of the child while it runs."""

    def __init__(self) -> None:
        self.ready: dict[str, Any] | None = None
        self.done: dict[str, Any] | None = None
        self.failure: dict[str, Any] | None = None  # backend failed or child crashed
        self.user_error: dict[str, Any] | None = None
        self.failure_at: float | None = None
        self.phase = "starting the worker"

    def take(self, kind: str, payload: dict[str, Any]) -> None:
        if kind == "phase":
            self.phase = str(payload.get("name", self.phase))
        elif kind == "ready":
            self.ready = payload
        elif kind == "done":
            self.done = payload
        elif kind == "error":
            self.user_error = payload
        elif kind in ("failed", "crash") and self.failure is None:
            self.failure = payload
            self.failure_at = time.monotonic()


def execute(spec: RunSpec, progress: ProgressSink | None = None) -> RunRecord:
    """Run ``spec`` end to end and return its record (also written to ``run.json``).

    Raises HarnessError for problems the user must fix before anything runs (unknown benchmark,
    missing dataset, model that does not fit the task).
    """
    emit = progress or (lambda p: None)
    task = create_task(spec.benchmark, task_options(spec))
    task.prepare(lambda done, total, label: emit(RunProgress("prepare", done, total, label=label)))
    cfg = spec.test_config(task.loadgen_model)
    run_dir = new_run_dir(spec.output_dir, spec.benchmark, spec.scenario,
                          spec.label or spec.mode)
    write_text_atomic(run_dir / "user.conf", render_user_conf(cfg))
    if spec.audit_config is not None:
        if not spec.audit_config.is_file():
            raise HarnessError(f"audit config not found: {spec.audit_config}",
                               hint="pass the path of an audit.config file")
        shutil.copyfile(spec.audit_config, run_dir / "audit.config")

    data: dict[str, Any] = {
        "format": RUN_FORMAT, "status": "running", "error": None,
        "benchmark": spec.benchmark, "loadgen_model": task.loadgen_model,
        "spec": spec.to_dict(), "test_config": cfg.to_dict(), "task": task.describe(),
        "backend": None, "system": describe_system(), "versions": package_versions(),
        "result": None, "accuracy": None, "started": now_iso(), "finished": None,
        "duration_s": None, **owner_fields(), "model_git_commit": git_commit_of(spec.model),
    }
    write_json_atomic(run_dir / "run.json", data)
    record_run(run_dir)  # the result index (mlharness.store)
    started = time.monotonic()
    record = RunRecord(run_dir, "running", data)
    try:
        watch = _supervise(spec, cfg, task, run_dir, emit)
    except KeyboardInterrupt as exc:
        how = getattr(exc, "signal_name", "SIGINT")
        _finish(record, "interrupted", started, {"message": f"interrupted by {how}"})
        exc.run_dir = run_dir  # type: ignore[attr-defined]
        raise
    if watch.ready:
        data["backend"] = watch.ready.get("backend")
        data["sut"] = watch.ready.get("policy")
        data["task"] = watch.ready.get("task", data["task"])
    report = (watch.done or watch.failure or {}).get("backend_report")
    if report:  # several nodes / replicas: who served what, who was lost, failovers
        data["distributed"] = report

    if (run_dir / "mlperf_log_detail.txt").is_file():
        try:
            record.result = parse_run_logs(run_dir)
            data["result"] = record.result.to_dict()
        except HarnessError:
            pass

    if watch.user_error:
        _finish(record, "error", started, watch.user_error)
        raise HarnessError(watch.user_error["message"], watch.user_error.get("hint", ""))
    if watch.failure or not watch.done:
        failure = watch.failure or {"message": "the run ended without a result"}
        _finish(record, "failed", started, failure)
        return record

    if spec.mode == "accuracy":
        emit(RunProgress("score", label="scoring accuracy"))
        entries = read_accuracy_log(run_dir / "mlperf_log_accuracy.json")
        record.accuracy = task.score(entries)
        write_text_atomic(run_dir / "accuracy.txt", record.accuracy.text + "\n")
        data["accuracy"] = record.accuracy.to_dict()
    _finish(record, "ok", started, None)
    return record


def _finish(record: RunRecord, status: str, started: float, error: dict | None) -> None:
    record.status = status
    record.data.update(status=status, error=error, finished=now_iso(),
                       duration_s=round(time.monotonic() - started, 3))
    write_json_atomic(record.run_dir / "run.json", record.data)
    record_run(record.run_dir)


def _supervise(spec: RunSpec, cfg: TestConfig, task: Task, run_dir: Path,
               emit: ProgressSink) -> _Watch:
    ctx = mp.get_context("spawn")
    channel = ctx.Queue()
    loaded = ctx.Value("q", 0, lock=False)
    completed = ctx.Value("q", 0, lock=False)
    proc = ctx.Process(target=child_main, name="mlharness-run",
                       args=(spec.to_dict(), str(run_dir), channel, loaded, completed,
                             os.getpid()))
    proc.start()
    watch = _Watch()
    run_t0: float | None = None
    last_activity, last_change = -1, time.monotonic()
    last_phase = watch.phase
    total = expected_samples(cfg, task)
    duration = expected_duration_s(cfg) if cfg.mode == "performance" else None
    emit(RunProgress("start", label="starting LoadGen"))
    try:
        while True:
            try:
                kind, payload = channel.get(timeout=0.2)
                watch.take(kind, payload)
                continue  # drain messages before looking at the process
            except queue.Empty:
                pass
            now = time.monotonic()
            if watch.ready and run_t0 is None:
                run_t0 = now
            activity = loaded.value + completed.value
            if activity != last_activity or watch.phase != last_phase:
                last_activity, last_change, last_phase = activity, now, watch.phase
            if run_t0 is not None and not watch.failure:
                phase = "run" if completed.value else "load"
                emit(RunProgress(phase, completed.value, total, now - run_t0, duration,
                                 label=f"{spec.scenario} {spec.mode}"))
            if not proc.is_alive():
                break
            if watch.failure and now - (watch.failure_at or now) > FAILURE_GRACE_S:
                break  # LoadGen did not wind down by itself: end it
            if now - last_change > spec.stall_timeout_s:
                watch.take("failed", {"message": stall_message(watch.phase, spec.stall_timeout_s),
                                      "phase": watch.phase})
                break
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(timeout=10)
        while True:  # messages sent just before exit
            try:
                kind, payload = channel.get_nowait()
            except (queue.Empty, OSError, ValueError):
                break
            watch.take(kind, payload)
    if not watch.done and not watch.failure and not watch.user_error:
        code = proc.exitcode
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        watch.take("crash", {"message": f"the run's worker process died ({how})"})
    return watch


def stall_message(phase: str, timeout_s: float) -> str:
    what = ("no sample loaded or completed" if phase == "running the LoadGen test"
            else f"no progress while {phase}")
    return (f"{what} for {timeout_s:g} s: the run stalled "
            f"(raise --stall-timeout if this phase is legitimately slow)")


def raise_if_failed(record: RunRecord) -> None:
    """Turn a failed record into RunFailed (for callers that want an exception)."""
    if record.status == "failed":
        err = record.data.get("error") or {}
        raise RunFailed(f"run failed: {err.get('message', 'unknown error')}",
                        hint=f"partial logs kept in {record.run_dir}")
