"""Execute one run: prepare the task, start the test in a child process, watch it, score it.

The parent never imports LoadGen. It watches the child through a message queue and two shared
counters, so it can show progress and end the run when the backend fails (``FAILURE_GRACE_S``),
the child dies, or nothing moves for ``spec.stall_timeout``. The stall clock runs from the
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from mlharness.artefacts.for_run import used_by
from mlharness.backends import check_backend_options, check_model_file
from mlharness.children import start_resource_tracker
from mlharness.distributed.ray_replicas import remove_own_ray_folder_of
from mlharness.errors import HarnessError, RunFailed
from mlharness.loadgen.mllog import LoadGenResult, parse_run_logs, read_accuracy_log
from mlharness.loadgen.settings import EffectiveSettings
from mlharness.files import write_text_atomic
from mlharness.hostinfo import describe_system, package_versions
from mlharness.protocol.token import read_token
from mlharness.record import RunRecord, Settings, Status
from mlharness.runner.busy import BUSY_CPU_S, cpu_seconds
from mlharness.runner.inflight import describe_in_flight
from mlharness.runner.inflight import discard as discard_in_flight
from mlharness.runner.journal import Journal
from mlharness.runner.messages import Crash, Done, Failed, Message, Phase, Ready, UserError
from mlharness.runner.rundir import new_run_dir
from mlharness.runner.worker import CRASH_FILE, LOADGEN_PHASE, WARMUP_PHASE, child_main
from mlharness.redact import scrub
from mlharness.spec import OPENAI_BACKEND, RunSpec
from mlharness.store import git_commit_of
from mlharness.sut.assemble import check_pairing, model_of, task_options
from mlharness.tasks import AccuracyResult, Task, benchmark_rules, create_task

#: LoadGen builds its whole query set before issuing the first query and releases it after the
#: last: 1.7 us a query measured here idle (20 M in 34 s), 6.6 us beside four busy processes;
#: 10 us a query is allowed on top of the stall timeout while LoadGen runs
GENERATION_S_PER_QUERY = 1e-5
#: starting the worker (spawning Python, importing numpy, the runtime and LoadGen) is our own
#: code, not the user's: it gets at least this long, however short --stall-timeout is (it took
#: over 4 s on two cores beside four busy processes)
STARTUP_S = 30.0
STARTING_PHASE = "starting the worker"
#: the phase of a run whose test finished and whose scoring failed (run.json's error.phase):
#: `mlharness score RUN_DIR` scores its kept log again
SCORING_PHASE = "scoring"
#: after a backend failure, LoadGen gets this long to finish by itself (unless more of its min
#: duration is still ahead: then it cannot, and waiting would only delay the verdict)
FAILURE_GRACE_S = 10.0


def _may_wind_down(now: float, failure_at: float | None, run_t0: float | None,
                   duration_s: float | None) -> bool:
    """Whether to keep waiting for LoadGen after a backend failure (``FAILURE_GRACE_S``)."""
    if now - (failure_at or now) > FAILURE_GRACE_S:
        return False
    ahead = duration_s - (now - run_t0) if duration_s and run_t0 is not None else 0.0
    return ahead <= FAILURE_GRACE_S


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
class RunOutcome:
    """What :func:`execute` returns: the run directory, its typed record and parsed results."""

    run_dir: Path
    record: RunRecord
    result: LoadGenResult | None = None
    accuracy: AccuracyResult | None = None

    @property
    def status(self) -> str:
        return self.record.status

    @property
    def data(self) -> dict[str, Any]:
        """``run.json`` as a dict."""
        return self.record.to_dict()

    @property
    def exit_code(self) -> int:
        """0 ok, 1 INVALID or accuracy below target, 3 the run failed."""
        return self.record.exit_code


def expected_samples(settings: EffectiveSettings, task: Task) -> int | None:
    """Samples the test will issue when that is known up front (accuracy, Offline)."""
    if settings.mode == "accuracy":
        override = int(settings.values.get("accuracy_sample_count_override") or 0)
        return override or task.total_count()
    if settings.scenario == "Offline":
        count = settings.samples_per_query
        loaded = min(task.performance_count(),
                     int(settings.values.get("performance_sample_count_override") or 0)
                     or task.performance_count())
        if settings.equal_issue and loaded:  # rounded up to a multiple of the samples loaded
            count = -(-count // loaded) * loaded
        return count
    return None


class _Watch:
    """Parent-side state of the child while it runs."""

    def __init__(self) -> None:
        self.ready: Ready | None = None
        self.done: Done | None = None
        self.failure: Failed | None = None  # backend failed, run stalled, or child crashed
        self.user_error: UserError | None = None
        self.failure_at: float | None = None
        self.phase = STARTING_PHASE
        self.phases = 0  # phases announced: each is progress, even under the same name
        self.allowance_s = 0.0  # the phase's time beyond the stall timeout (e.g. torch.compile)

    def take(self, message: Message) -> None:
        match message:
            case Phase(name, allowance_s):
                self.phases += 1
                self.phase, self.allowance_s = name, allowance_s
            case Ready():
                self.ready = message
            case Done():
                self.done = message
            case UserError():
                self.user_error = message
            case Failed() | Crash() if self.failure is None:
                self.failure = (message if isinstance(message, Failed)
                                else Failed(message.message, message.traceback))
                self.failure_at = time.monotonic()


def execute(spec: RunSpec, progress: ProgressSink | None = None) -> RunOutcome:
    """Run ``spec`` end to end and return its record (also written to ``run.json``).

    Raises HarnessError for problems the user must fix before anything runs (unknown benchmark,
    missing dataset, model that does not fit the task). Whatever ends it (a signal while the
    logs are parsed or scored, a bug), a started run's record never stays at ``"running"``.
    """
    started: list[Journal] = []  # the run once its run.json exists
    try:
        return _execute(spec, progress, started)
    except BaseException as exc:
        if started and not started[0].finished:
            journal = started[0]
            name = getattr(exc, "signal_name", "SIGINT")
            status: Status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "error"
            message = (f"interrupted by {name}" if status == "interrupted"
                       else f"{type(exc).__name__}: {exc}")
            disk = isinstance(exc, OSError) and status == "error"
            if isinstance(exc, OSError) and disk:  # a file the run writes (e.g. accuracy.txt):
                status = "failed"  # the run failed, exit 3
                message = f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename
                                                      else "")
            try:
                journal.finish(status, {"message": message})
            except RunFailed:
                if not isinstance(exc, KeyboardInterrupt):
                    raise
            if isinstance(exc, KeyboardInterrupt):
                exc.run_dir = journal.run_dir  # type: ignore[attr-defined]
            elif disk:
                raise RunFailed(f"the run failed: {message}",
                                hint="free some space or write elsewhere, then re-run the test"
                                ) from None
        raise


def checked_task(spec: RunSpec) -> Task:
    """The task ``spec`` names, once what the user must fix before anything runs is refused
    (HarnessError): an unknown benchmark or backend, a benchmark out of the named round, bad
    backend options, a missing dataset or model file, a token file that is no token, a text
    benchmark on a tensor runtime. Called before a run, and before the probe runs that measure
    its target (nothing of them is left for a bad input)."""
    benchmark_rules(spec.benchmark, spec.round)  # one the named round has no rules for
    check_backend_options(spec.backend, spec.backend_option)
    if spec.distribution.kind == "remote":  # a token file that is no token: exit 2, now
        read_token(spec.distribution.token_file)
    task = create_task(spec.benchmark, task_options(spec))
    check_pairing(spec, task)
    model = model_of(spec, task)
    # a node's or replica's model is on its machine; none given is said where it loads (after
    # the data set's own problems, which task.prepare finds)
    if model is not None and spec.distribution.local:
        check_model_file(spec.backend, model)
    return task


def _execute(spec: RunSpec, progress: ProgressSink | None,
             started_runs: list[Journal]) -> RunOutcome:
    emit = progress or (lambda p: None)
    task = checked_task(spec)
    if spec.mode == "accuracy":  # what scoring needs, before the first sample rather than after
        task.check_scoring()
    task.prepare(lambda done, total, label: emit(RunProgress("prepare", done, total, label=label)))
    settings = spec.settings(task.loadgen_model_for(spec.scenario),
                             samples=task.performance_count())
    run_dir = new_run_dir(spec.output_dir, spec.benchmark, spec.scenario,
                          spec.label or spec.mode)
    write_text_atomic(run_dir / "user.conf", settings.render_user_conf())
    if spec.audit_config is not None:
        if not spec.audit_config.is_file():
            raise HarnessError(f"audit config not found: {spec.audit_config}",
                               hint="pass the path of an audit.config file")
        shutil.copyfile(spec.audit_config, run_dir / "audit.config")

    data = RunRecord(
        benchmark=spec.benchmark, loadgen_model=task.loadgen_model, purpose=spec.purpose,
        spec=spec, settings=Settings.model_validate(settings.to_dict()),
        test_config=spec.test_config(task.loadgen_model_for(spec.scenario)).to_dict(),
        task=task.describe(),
        system=describe_system(), versions=package_versions(),
        model_git_commit=git_commit_of(spec.model),
        artefacts=used_by({"model": spec.model, "dataset": spec.dataset, "vocab": spec.vocab},
                          spec.cache_dir) or None)
    journal = Journal.open(run_dir, data)
    record = RunOutcome(run_dir, data)
    started_runs.append(journal)  # execute() records the end if anything below raises
    watch = _supervise(spec, settings, task, run_dir, emit)
    if watch.ready:
        data.backend = watch.ready.backend
        data.sut = watch.ready.sut
        if watch.done:
            data.sut.warmup_s = watch.done.warmup_s
            data.sut.warmup_shapes = watch.done.warmup_shapes
        data.task = watch.ready.task
    ended = watch.done or watch.failure
    if ended is not None and ended.backend_report:  # several nodes / replicas: who served
        data.distributed = ended.backend_report  # what, who was lost, failovers
    if ended is not None and ended.stream_report and data.sut is not None:
        data.sut.stream_report = ended.stream_report  # requests per server, concurrency
    if (run_dir / "mlperf_log_detail.txt").is_file():
        try:
            record.result = data.result = parse_run_logs(run_dir)
        except HarnessError:
            pass
    bound = (ended.stream_report or {}).get("bound") if ended is not None else None
    if bound and data.result is not None and data.result.valid is False:
        # the client's own queue is in the latencies LoadGen judged: the reasons name it
        data.result.reasons.append(f"a client-side limit held queries: {bound}")

    if watch.user_error:
        journal.finish("error", watch.user_error.to_error())
        raise HarnessError(watch.user_error.message, watch.user_error.hint)
    if watch.failure or not watch.done:
        failure = watch.failure or Failed("the run ended without a result")
        journal.finish("failed", failure.to_error())
        return record

    if spec.mode == "accuracy":
        emit(RunProgress("score", label="scoring accuracy"))
        entries = read_accuracy_log(run_dir / "mlperf_log_accuracy.json")
        try:
            record.accuracy = task.score(entries)
        except HarnessError as exc:  # `mlharness score RUN_DIR` scores the kept log later
            journal.finish("error", {"message": exc.message, "hint": exc.hint,
                                     "phase": SCORING_PHASE})
            raise
        except Exception as exc:  # noqa: BLE001 - a task's scoring bug fails the run, not the CLI
            journal.finish("failed", {"message": f"scoring failed: {type(exc).__name__}: {exc}",
                                      "phase": SCORING_PHASE})
            return record
        write_text_atomic(run_dir / "accuracy.txt", record.accuracy.text + "\n")
        data.accuracy = record.accuracy
    journal.finish("ok")
    return record


def _supervise(spec: RunSpec, settings: EffectiveSettings, task: Task, run_dir: Path,
               emit: ProgressSink) -> _Watch:
    start_resource_tracker()  # before the queue: a SIGHUP to the process group must not end it
    ctx = mp.get_context("spawn")
    channel = ctx.Queue()
    loaded = ctx.Value("q", 0, lock=False)
    completed = ctx.Value("q", 0, lock=False)
    # progress besides samples: what a streaming backend received, or the backend calls of a
    # task of many calls a sample (3D-UNet's windows)
    streamed = ctx.Value("q", 0, lock=False)
    proc = ctx.Process(target=child_main, name="mlharness-run",
                       args=(spec.to_dict(), settings, str(run_dir), channel, loaded,
                             completed, os.getpid(), streamed))
    proc.start()
    watch = _Watch()
    run_t0: float | None = None
    last_activity, last_change = -1, time.monotonic()
    busy_since = 0.0  # the worker's CPU seconds when setting up last counted as progress
    last_phases = watch.phases
    # an audit's audit.config changes the counts LoadGen uses (TEST06: 100 queries): unknown
    total = expected_samples(settings, task) if spec.audit_config is None else None
    duration = settings.expected_duration_s() if settings.mode == "performance" else None
    queries = settings.generated_queries
    generating_s = queries * GENERATION_S_PER_QUERY
    shown_phase = watch.phase
    emit(RunProgress("start", label=shown_phase))
    try:
        while True:
            try:
                watch.take(channel.get(timeout=0.2))
                continue  # drain messages before looking at the process
            except queue.Empty:
                pass
            now = time.monotonic()
            if not watch.ready and watch.phase != shown_phase:  # e.g. a compile at load
                shown_phase = watch.phase
                emit(RunProgress("start", label=shown_phase))
            if watch.ready and run_t0 is None:
                run_t0 = now
            activity = loaded.value + completed.value + streamed.value
            if activity != last_activity or watch.phases != last_phases:
                last_activity, last_change, last_phases = activity, now, watch.phases
            if not watch.ready and watch.phase != LOADGEN_PHASE:
                # setting up (data set, model): a worker that computes is not stalled, however
                # slowly a busy machine lets it (it has no samples to count yet)
                cpu = cpu_seconds(proc.pid) if proc.pid is not None else None
                if cpu is not None and cpu - busy_since >= BUSY_CPU_S:
                    last_change, busy_since = now, cpu
            if run_t0 is not None and not watch.failure:
                phase = "run" if completed.value else "load"
                label = f"{spec.scenario} {spec.mode}"
                if watch.phase == WARMUP_PHASE:
                    label += " (warming up the backend, untimed)"
                if not completed.value and generating_s > 5:
                    label += (f" (LoadGen builds its {queries / 1e6:.0f} M "
                              "queries first)")
                emit(RunProgress(phase, completed.value, total, now - run_t0, duration,
                                 label=label))
            if not proc.is_alive():
                break
            if watch.failure and not _may_wind_down(now, watch.failure_at, run_t0, duration):
                break  # LoadGen did not wind down by itself, or cannot in time: end it
            # LoadGen builds its queries before the first sample and releases them after the
            # last, with no sample activity either time: both take time in proportion
            building = generating_s if watch.phase == LOADGEN_PHASE else 0.0
            building += watch.allowance_s
            limit = spec.stall_timeout + building
            if watch.phase == STARTING_PHASE:
                limit = max(limit, STARTUP_S)
            if now - last_change > limit:
                watch.take(Failed(stall_message(watch.phase, limit - building, building,
                                                servers=llm_servers(spec)),
                                  phase=watch.phase))
                break
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(timeout=10)
        if proc.pid is not None and proc.exitcode != 0:  # killed before it cleaned up
            remove_own_ray_folder_of(proc.pid)
        while True:  # messages sent just before exit
            try:
                message = channel.get_nowait()
            except (queue.Empty, OSError, ValueError):
                break
            watch.take(message)
    if not watch.done and not watch.failure and not watch.user_error:
        code = proc.exitcode
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        where = f" in {spec.backend} {spec.precision} while {watch.phase}"
        if code is not None and code < 0:  # a native crash: which shapes the backend ran
            where += f", {describe_in_flight(run_dir) or 'no batch in flight'}"
        watch.take(Crash(f"the run's worker process died ({how}){where}"))
    discard_in_flight(run_dir)
    crash = run_dir / CRASH_FILE
    if crash.is_file() and crash.stat().st_size == 0:
        crash.unlink()  # nothing crashed
    elif crash.is_file() and watch.failure and watch.failure.crash_log is None:
        watch.failure.crash_log = str(crash)
        watch.failure.message += f"; the Python stack of each thread is in {crash}"
    return watch


def llm_servers(spec: RunSpec) -> list[str]:
    """The LLM servers of an openai run (its ``endpoints``), for the stall's line."""
    if spec.backend != OPENAI_BACKEND:
        return []
    urls = spec.backend_option.get("endpoints") or []
    return [str(u) for u in (urls.split(",") if isinstance(urls, str) else urls)]


def stall_message(phase: str, timeout_s: float, building_s: float = 0.0,
                  servers: list[str] | None = None) -> str:
    what = ("no sample loaded or completed" if phase == LOADGEN_PHASE
            else f"no progress while {phase}")
    if servers and phase == LOADGEN_PHASE:
        what = (f"nothing streamed from {', '.join(scrub(u) for u in servers)} and no sample "
                "completed")
    why = ("for LoadGen to build and release its queries" if phase == LOADGEN_PHASE
           else "for this phase")
    extra = f" (+{building_s:.0f} s allowed {why})" if building_s >= 1 else ""
    return (f"{what} for {timeout_s:g} s{extra}: the run stalled "
            f"(raise --stall-timeout if this phase is legitimately slow)")


def raise_if_failed(record: RunOutcome) -> None:
    """Turn a failed record into RunFailed (for callers that want an exception)."""
    if record.status == "failed":
        raise RunFailed(f"run failed: {record.record.error_message or 'unknown error'}",
                        hint=f"partial logs kept in {record.run_dir}")
