"""The child process of a run: build task + backend + engine, run one LoadGen test, report.

One test per process keeps LoadGen's process-wide config state clean (one FromConfig per
process). Messages to the parent go through ``channel`` as ``(kind, payload)`` tuples:
``phase`` (a new phase began: the parent's stall clock restarts, with the phase's
allowance on top of the stall timeout), ``ready``, ``failed``
(backend raised), ``error`` (HarnessError), ``crash``, ``done``. Progress goes through two
shared counters (samples loaded, samples completed). The child ignores SIGINT and SIGHUP (the
parent ends it) and exits by itself when its parent is gone (e.g. killed with SIGKILL).
"""

from __future__ import annotations

import faulthandler
import re
import threading
import traceback
from pathlib import Path
from typing import Any

from mlharness.children import watch_parent
from mlharness.errors import HarnessError


def _counter_thread(engine: Any, completed: Any, stop: threading.Event) -> None:
    while not stop.wait(0.1):
        completed.value = engine.completed
    completed.value = engine.completed


#: samples per load request to nodes / replicas
LOAD_CHUNK = 64
COMPILE_PHASE = "loading and compiling the model"  # a load the backend allows extra time for
LOADGEN_PHASE = "running the LoadGen test"  # the phase while LoadGen runs (parent: stall clock)
WARMUP_PHASE = "warming up the backend"  # untimed batches before LoadGen starts
#: where a crashing worker's Python stacks go (faulthandler); removed when it stays empty
CRASH_FILE = "worker_crash.txt"


def build_local(spec: Any, phase: Any = None, cpus: list[int] | None = None,
                threads: int | None = None, first: Any = None) -> tuple[Any, Any]:
    """The task and the loaded, signature-checked backend a RunSpec names (used by a run's child
    process, by ``mlharness serve`` nodes and by Ray replicas); ``phase(name, allowance_s)``
    hears the steps.
    ``cpus``/``threads``: one instance of several (``--instances``), on that block of cores;
    ``first``: the first instance, whose loaded model a backend with ``load_shared`` shares."""
    from mlharness.backends import (BackendOptions, backend_options, check_index_ranges,
                                    check_signature, create_backend)
    from mlharness.sut.placement import pinned
    from mlharness.tasks import create_task

    phase = phase or (lambda name, allowance_s=0.0: None)
    phase("loading the dataset")
    task = create_task(spec.benchmark, task_options(spec))
    phase("loading the model")
    backend = create_backend(spec.backend)
    model = spec.model or task.default_model
    options = BackendOptions(threads=threads or spec.threads, precision=spec.precision,
                             device=spec.device, cache_dir=spec.cache_dir, run_spec=spec.to_dict(),
                             extra=backend_options(backend, spec.backend_option),
                             scenario=spec.scenario, cpus=cpus or None,
                             task_inputs=list(task.model_inputs))
    shares = hasattr(backend, "load_shared")  # instances call one model (pytorch)
    if first is not None and shares:
        backend.load_shared(first, options)
    else:
        # a backend that compiles at load (torch.compile) says how much longer it may take;
        # the user sees why the load takes minutes
        allowance = getattr(backend, "load_allowance_s", lambda extra, model: 0.0)(
            options.extra, model)
        if allowance:
            phase(COMPILE_PHASE, allowance)
        # an instance with a model of its own loads it on its own cores, so its weights land
        # in their NUMA node's memory; a shared model (and its compile workers) keeps them all
        with pinned(None if shares else cpus):
            backend.load(model, options)
    check_signature(task.model_inputs, backend.inputs, str(model), spec.batch_size)
    if first is None:  # the other instances load the same file: its tables are known
        check_index_ranges(task.index_ranges(), getattr(backend, "index_limits", {}),
                           str(model))
    return task, backend


def build_instances(spec: Any, phase: Any = None) -> tuple[Any, list[Any], Any]:
    """``--instances N --threads-per-instance M``: the task, N backends each loaded for its own
    block of cores (sharing the first's model where the backend can), and the placement (None
    for the usual single backend)."""
    from mlharness.sut.placement import place

    if spec.instances <= 1 and not spec.threads_per_instance:
        task, backend = build_local(spec, phase)
        return task, [backend], None
    placement = place(spec.instances, spec.threads_per_instance)
    instances: list[Any] = []
    for k, cpus in enumerate(placement.cpus, 1):
        # every announced phase is progress for the stall clock; the name tells the user
        # which of the N instances is loading
        def instance_phase(name: str, allowance_s: float = 0.0, k: int = k) -> None:
            if phase is not None:
                phase(f"{name} (instance {k} of {len(placement.cpus)})", allowance_s)

        task, backend = build_local(spec, instance_phase, cpus, placement.threads,
                                    first=instances[0] if instances else None)
        instances.append(backend)
    placement.shared_model = len(instances) > 1 and hasattr(instances[0], "load_shared")
    return task, instances, placement


def warm_up(holder: Any, engine: Any, batches: int, phase: Any) -> float:
    """``batches`` untimed batches per worker of each warm-up shape, from the first sample; the
    samples they name are loaded for them alone by ``holder`` (the task, or the backend that
    holds the samples); the seconds they took."""
    if not batches:
        return 0.0
    phase("loading samples for the warm-up")
    needed = sorted({i for batch in engine.warmup_plan(0) for i in batch})
    holder.load_samples(needed)
    try:
        phase(WARMUP_PHASE)
        return engine.warm_up(batches, 0)
    finally:
        holder.unload_samples(needed)


def round_seeds(spec: Any, run_dir: Path) -> dict[str, int]:
    """The seeds ``spec.round`` sets from code; a TEST05 audit (its audit.config says
    ``*.*.test05 = 1``) gets the round's TEST05 seeds."""
    from mlharness import rules

    audit = run_dir / "audit.config"
    text = audit.read_text() if spec.audit_config is not None and audit.is_file() else ""
    test05 = re.search(r"^\*\.\*\.test05\s*=\s*1\s*$", text, re.MULTILINE) is not None
    return rules.loadgen_seeds(spec.round, test05)


def child_main(spec_data: dict[str, Any], run_dir: str, channel: Any, loaded: Any,
               completed: Any, parent_pid: int | None = None) -> None:
    """Entry point of the run's child process (spawned; arguments are picklable)."""
    if parent_pid is not None:
        watch_parent(parent_pid)
    # a runtime that crashes the process (SIGSEGV, SIGABRT) leaves every thread's Python stack
    crash_log = open(Path(run_dir) / CRASH_FILE, "w")  # noqa: SIM115 - open until exit
    faulthandler.enable(crash_log, all_threads=True)
    from mlharness.backends import SampleBackend
    from mlharness.backends.base import fixed_batch
    from mlharness.loadgen.session import SampleLibrary, complete, run_test
    from mlharness.spec import RunSpec
    from mlharness.sut import Engine, policy_for

    def phase(name: str, allowance_s: float = 0.0) -> None:
        """A new phase began; ``allowance_s``: time it may take beyond the stall timeout."""
        channel.put(("phase", {"name": name, "allowance_s": allowance_s}))

    try:
        spec = RunSpec.model_validate(spec_data)
        task, instances, placement = build_instances(spec, phase)
        backend = instances[0]
        settings = spec.settings(task.loadgen_model)
        # a model exported with a fixed batch (e.g. the official RetinaNet ONNX: 1) caps the
        # default batch size; a larger explicit --batch-size was refused by check_signature
        policy = policy_for(spec.scenario, spec.batch_size or fixed_batch(backend.inputs),
                            spec.length_sort, settings.samples_per_query)
        # a backend that holds the samples itself (remote nodes, Ray replicas) loads them and
        # runs indices; it also suggests how many batches to keep in flight
        holds = isinstance(backend, SampleBackend)
        workers = spec.workers if spec.workers > 1 or not holds else backend.concurrency
        workers = max(workers, len(instances))
        report = backend.report if holds else (lambda: None)
        # accuracy runs are not timed: no warm-up
        warmup = spec.warmup if spec.mode == "performance" else 0
        channel.put(("ready", {"task": task.describe(), "backend": backend.describe(),
                               "total": task.total_count(),
                               "performance_count": task.performance_count(),
                               "policy": {"max_batch": policy.max_batch, "inline": policy.inline,
                                          "sort_by_length": policy.sort_by_length,
                                          "workers": workers, "warmup_batches": warmup,
                                          **({"placement": placement.to_dict()} if placement
                                             else {})}}))

        def on_failure(message: str) -> None:
            channel.put(("failed", {"message": message,
                                    "traceback": getattr(engine, "failure_traceback", ""),
                                    "backend_report": report()}))

        engine = Engine(task, backend, policy, complete, workers=workers,
                        on_failure=on_failure, instances=instances,
                        cpus=placement.cpus if placement else ())

        def load(indices: list[int]) -> None:
            if holds:  # nodes / replicas: in chunks, each chunk progress for the stall clock
                for k in range(0, len(indices), LOAD_CHUNK):
                    part = indices[k:k + LOAD_CHUNK]
                    backend.load_samples(part)
                    loaded.value += len(part)
                return
            for i in indices:  # one at a time: each sample is progress for the stall clock
                task.load_samples([i])
                loaded.value += 1

        try:
            warmup_s = warm_up(backend if holds else task, engine, warmup, phase)
        except Exception as exc:  # noqa: BLE001 - the backend's failure, told as one
            channel.put(("failed", {"message": f"the backend failed while warming up: "
                                               f"{type(exc).__name__}: {exc}",
                                    "traceback": traceback.format_exc()}))
            return
        qsl = SampleLibrary(task.total_count(), task.performance_count(), load,
                            backend.unload_samples if holds else task.unload_samples)
        stop = threading.Event()
        counter = threading.Thread(target=_counter_thread, args=(engine, completed, stop),
                                   daemon=True)
        counter.start()
        engine.start()
        phase(LOADGEN_PHASE)
        try:
            run_test(settings, Path(run_dir) / "user.conf", Path(run_dir), qsl, engine.issue,
                     engine.flush, audit=spec.audit_config is not None,
                     sut_name=backend.sut_name if holds else None,
                     seeds=round_seeds(spec, Path(run_dir)))
        finally:
            engine.stop()
            stop.set()
            counter.join()
            if holds:
                backend.close()
        channel.put(("done", {"completed": engine.completed, "batches": engine.batches,
                              "warmup_s": round(warmup_s, 3),
                              "warmup_shapes": engine.warmup_shapes,
                              "failure": engine.failure, "backend_report": report()}))
    except HarnessError as exc:
        channel.put(("error", {"type": type(exc).__name__, "message": exc.message,
                               "hint": exc.hint, "traceback": traceback.format_exc()}))
    except BaseException as exc:  # noqa: BLE001 - report anything to the parent
        channel.put(("crash", {"message": f"{type(exc).__name__}: {exc}",
                               "traceback": traceback.format_exc()}))


def task_options(spec: Any) -> Any:
    from mlharness.backends import declared_inputs
    from mlharness.files import cache_root
    from mlharness.tasks import TaskOptions

    if spec.cache_dir is not None:
        cache_root(spec.cache_dir)  # refuses a --cache-dir that is not a directory

    return TaskOptions(dataset=spec.dataset, model=spec.model, vocab=spec.vocab,
                       cache_dir=spec.cache_dir, max_samples=spec.max_samples,
                       extra=dict(spec.task_option),
                       model_inputs=declared_inputs(spec.backend, spec.model))
