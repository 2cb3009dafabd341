"""The child process of a run: build task + backend + engine, run one LoadGen test, report.

One test per process keeps LoadGen's process-wide config state clean (one FromConfig per
process). Messages to the parent go through ``channel``, each a typed message of
``runner/messages.py`` (Phase, Ready, Failed, UserError, Crash, Done). Progress goes through two
shared counters (samples loaded, samples completed). The child ignores SIGINT and SIGHUP (the
parent ends it) and exits by itself when its parent is gone (e.g. killed with SIGKILL).
"""

from __future__ import annotations

import faulthandler
import re
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

from mlharness import rules
from mlharness.backends import prepare_process
from mlharness.backends.base import (Backend, IssuePattern, StreamingBackend, fixed_batch,
                                    is_streaming)
from mlharness.children import watch_parent
from mlharness.distributed import PoolBackend, build_pool
from mlharness.errors import HarnessError
from mlharness.loadgen.settings import EffectiveSettings
from mlharness.record import SutRecord
from mlharness.redact import ScrubbedStream, guard_output
from mlharness.runner.inflight import InFlight
from mlharness.runner.messages import (Channel, Counter, Crash, Done, Failed, Phase, Ready,
                                       UserError)
from mlharness.spec import RunSpec
from mlharness.sut import Engine, StreamEngine, policy_for
from mlharness.sut.assemble import PhaseHook, build_instances, runtimes
from mlharness.sut.samples import SampleHome, sample_home
from mlharness.tasks import GenerationTask


def _counter_thread(engine: Engine | StreamEngine, completed: Counter,
                    stop: threading.Event, streamed: Counter | None = None,
                    progress: Callable[[], int] | None = None) -> None:
    """Copy the engine's completions, and ``progress()`` (what a streaming backend received,
    or the backend calls of a task of many calls a sample) into the parent's counters."""
    while True:
        completed.value = engine.completed
        if streamed is not None and progress is not None:
            streamed.value = progress()
        if stop.wait(0.1):
            break
    completed.value = engine.completed


LOADGEN_PHASE = "running the LoadGen test"  # the phase while LoadGen runs (parent: stall clock)
WARMUP_PHASE = "warming up the backend"  # untimed batches before LoadGen starts
#: where a crashing worker's Python stacks go (faulthandler); removed when it stays empty
CRASH_FILE = "worker_crash.txt"


def warm_up(home: SampleHome, engine: Engine, batches: int, phase: PhaseHook) -> float:
    """``batches`` untimed batches per worker of each warm-up shape, from the first sample; the
    samples they name are loaded for them alone where the samples live; the seconds they took."""
    if not batches:
        return 0.0
    phase("loading samples for the warm-up")
    needed = sorted({i for batch in engine.warmup_plan(0) for i in batch})
    home.load(needed)
    try:
        phase(WARMUP_PHASE)
        # each batch is progress: a slow model warming up many shapes outlasts the stall clock
        return engine.warm_up(batches, 0, lambda: phase(WARMUP_PHASE))
    finally:
        home.unload(needed)


def round_seeds(spec: RunSpec, run_dir: Path) -> dict[str, int]:
    """The seeds ``spec.round`` sets from code; a TEST05 audit (its audit.config says
    ``*.*.test05 = 1``) gets the round's TEST05 seeds."""
    audit = run_dir / "audit.config"
    text = audit.read_text() if spec.audit_config is not None and audit.is_file() else ""
    test05 = re.search(r"^\*\.\*\.test05\s*=\s*1\s*$", text, re.MULTILINE) is not None
    return rules.loadgen_seeds(spec.round, test05)


def _run_streaming(spec: RunSpec, settings: EffectiveSettings, task: GenerationTask,
                   backend: StreamingBackend, run_dir: str, channel: Channel, loaded: Counter,
                   completed: Counter, phase: PhaseHook, streamed: Counter | None = None
                   ) -> None:
    """The LLM path: LoadGen's samples become generation requests to a streaming backend; the
    first token and the whole answer go to LoadGen as they arrive (sut/stream.py)."""
    # lazy: the parent imports this module and never mlperf_loadgen (only the child runs it)
    from mlharness.loadgen.session import (SampleLibrary, complete_generated, first_token,
                                           run_test)

    warmup = spec.warmup if spec.mode == "performance" else 0
    described = backend.describe()
    sends = backend.sends(task.request(0)) if task.total_count() else None
    if sends:  # which form the prompts went in: token ids, text or chat messages
        described["prompt"] = sends
    channel.put(Ready(task.describe(), described, task.total_count(),
                      task.performance_count(),
                      SutRecord(streaming=True, concurrency=backend.concurrency,
                                warmup_requests=warmup)))

    def on_failure(message: str) -> None:
        channel.put(Failed(message, "", None, stream_report=backend.report() or None))

    engine = StreamEngine(task, backend, first_token, complete_generated,
                          on_failure=on_failure)
    try:
        warmup_s = 0.0
        if warmup:
            phase(WARMUP_PHASE)
            try:
                warmup_s = engine.warm_up(warmup)
            except Exception as exc:  # noqa: BLE001 - the backend's failure, told as one
                channel.put(Failed(f"the backend failed while warming up: {exc}",
                                   traceback.format_exc()))
                return
        # the warm-up's requests go one after another: their mean is one request's time
        target_qps = settings.get("target_qps")
        backend.issue_pattern(IssuePattern.of(
            spec.scenario, float(target_qps) if target_qps else None,
            warmup_s / warmup if warmup else None))

        def load(indices: Sequence[int]) -> None:
            task.load_samples(indices)
            loaded.value += len(indices)

        qsl = SampleLibrary(task.total_count(), task.performance_count(), load,
                            task.unload_samples)
        stop = threading.Event()
        counter = threading.Thread(target=_counter_thread,
                                   args=(engine, completed, stop, streamed, backend.progress),
                                   daemon=True)
        counter.start()
        phase(LOADGEN_PHASE)
        try:
            run_test(settings, Path(run_dir) / "user.conf", Path(run_dir), qsl, engine.issue,
                     engine.flush, audit=spec.audit_config is not None,
                     seeds=round_seeds(spec, Path(run_dir)))
        finally:
            engine.stop()
            stop.set()
            counter.join()
        channel.put(Done(engine.completed, engine.batches, round(warmup_s, 3), 0,
                         engine.failure, None, stream_report=backend.report() or None))
    finally:
        backend.close()


def child_main(spec_data: dict[str, Any], settings: EffectiveSettings, run_dir: str,
               channel: Channel, loaded: Counter, completed: Counter,
               parent_pid: int | None = None, streamed: Counter | None = None) -> None:
    """Entry point of the run's child process (spawned; arguments are picklable).
    ``settings``: the effective LoadGen settings the parent decided and wrote into user.conf."""
    prepare_process(str(spec_data.get("backend", "")))  # first: no other thread runs yet
    # no secret in what the worker prints: a library's log line (asyncio's "Exception in
    # callback"), a traceback multiprocessing prints, anything written to stderr
    guard_output()
    stderr = sys.stderr
    sys.stderr = ScrubbedStream(lambda: stderr)  # type: ignore[assignment]
    if parent_pid is not None:
        watch_parent(parent_pid)
    # a runtime that crashes the process (SIGSEGV, SIGABRT) leaves every thread's Python stack
    crash_log = open(Path(run_dir) / CRASH_FILE, "w")  # noqa: SIM115 - open until exit
    faulthandler.enable(crash_log, all_threads=True)
    # lazy: the parent imports this module and never mlperf_loadgen (only the child runs it)
    from mlharness.loadgen.session import SampleLibrary, complete, run_test

    def phase(name: str, allowance_s: float = 0.0) -> None:
        """A new phase began; ``allowance_s``: time it may take beyond the stall timeout."""
        channel.put(Phase(name, allowance_s))

    try:
        spec = RunSpec.model_validate(spec_data)
        backend: Backend | PoolBackend
        if spec.distribution.local:
            built, loaded_backends, placement = build_instances(spec, phase)
            first = loaded_backends[0]
            if isinstance(built, GenerationTask) and is_streaming(first):  # paired by assemble
                _run_streaming(spec, settings, built, first, run_dir, channel, loaded,
                               completed, phase, streamed)
                return
            task, instances = runtimes(built, loaded_backends)
            backend = instances[0]
        else:  # serve nodes or Ray actors hold the samples and run them
            task, backend = build_pool(spec, phase)
            instances, placement = [], None
        # a model exported with a fixed batch (e.g. the official RetinaNet ONNX: 1) caps the
        # default batch size; a larger explicit --batch-size was refused by check_signature; a
        # task whose sample is many calls takes few samples a call (Task.samples_per_call)
        policy = policy_for(spec.scenario, spec.batch_size or task.samples_per_call
                            or fixed_batch(backend.inputs),
                            spec.length_sort, settings.samples_per_query,
                            inline=isinstance(backend, Backend) and type(backend).inline)
        # here, or on nodes / replicas that load and run the samples and suggest how many
        # batches to keep in flight
        home = sample_home(task, backend)
        workers = max(spec.workers if spec.workers > 1 else home.concurrency, len(instances))
        # accuracy runs are not timed: no warm-up
        warmup = spec.warmup if spec.mode == "performance" else 0
        channel.put(Ready(task.describe(), backend.describe(), task.total_count(),
                          task.performance_count(),
                          SutRecord(max_batch=policy.max_batch, inline=policy.inline,
                                    sort_by_length=policy.sort_by_length, workers=workers,
                                    warmup_batches=warmup,
                                    placement=placement.to_dict() if placement else None)))

        def on_failure(message: str) -> None:
            channel.put(Failed(message, engine.failure_traceback, home.report()))

        # a death by signal names the shapes in flight (runner/inflight.py); a backend with
        # no native runtime (BackendBase.inline) has none to name
        if home.local and not all(type(instance).inline for instance in instances):
            recorder = InFlight(Path(run_dir))
            for instance in instances:
                recorder.wrap(instance)
        engine = Engine(task, backend, policy, complete, workers=workers,
                        on_failure=on_failure, instances=instances,
                        cpus=placement.cpus if placement else ())

        def load(indices: Sequence[int]) -> None:
            chunk = home.load_chunk  # each call is progress for the stall clock
            for k in range(0, len(indices), chunk):
                part = list(indices[k:k + chunk])
                home.load(part)
                loaded.value += len(part)

        try:
            warmup_s = warm_up(home, engine, warmup, phase)
        except Exception as exc:  # noqa: BLE001 - the backend's failure, told as one
            channel.put(Failed(f"the backend failed while warming up: "
                               f"{type(exc).__name__}: {exc}", traceback.format_exc()))
            return
        qsl = SampleLibrary(task.total_count(), task.performance_count(), load,
                            lambda indices: home.unload(list(indices)))
        stop = threading.Event()
        counter = threading.Thread(target=_counter_thread,
                                   args=(engine, completed, stop, streamed,
                                         lambda: engine.calls), daemon=True)
        counter.start()
        engine.start()
        phase(LOADGEN_PHASE)
        try:
            run_test(settings, Path(run_dir) / "user.conf", Path(run_dir), qsl, engine.issue,
                     engine.flush, audit=spec.audit_config is not None,
                     sut_name=home.sut_name,
                     seeds=round_seeds(spec, Path(run_dir)))
        finally:
            engine.stop()
            stop.set()
            counter.join()
            home.close()
        channel.put(Done(engine.completed, engine.batches, round(warmup_s, 3),
                         engine.warmup_shapes, engine.failure, home.report()))
    except HarnessError as exc:
        channel.put(UserError(type(exc).__name__, exc.message, exc.hint,
                              traceback.format_exc()))
    except BaseException as exc:  # noqa: BLE001 - report anything to the parent
        channel.put(Crash(f"{type(exc).__name__}: {exc}", traceback.format_exc()))
