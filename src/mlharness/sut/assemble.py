"""The parts of a run that execute samples, assembled from its RunSpec: the task and the loaded,
signature-checked backend (``--instances``: one per block of cores). A run's child process, a
``mlharness serve`` node and a Ray replica all assemble theirs here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mlharness.backends import (Backend, BackendBase, BackendOptions, backend_options, check_index_ranges,
                                check_signature, create_backend, declared_inputs, generates_text)
from mlharness.errors import ConfigError
from mlharness.files import cache_root
from mlharness.spec import RunSpec
from mlharness.sut.placement import Placement, pinned, place
from mlharness.tasks import GenerationTask, Task, TaskOptions, TensorTask, create_task

COMPILE_PHASE = "loading and compiling the model"  # a load the backend allows extra time for
#: hears the steps of a load: ``phase(name, allowance_s)`` (the time it may take beyond the
#: stall timeout)
PhaseHook = Callable[..., None]


def model_of(spec: RunSpec, task: Task) -> Path | None:
    """The model a run of ``spec`` loads: ``--model``, else the task's own (the demo's)."""
    return spec.model or task.default_model


def check_pairing(spec: RunSpec, task: Task) -> None:
    """Refuse a text-generation benchmark on a tensor runtime, and the reverse, before anything
    loads; an LLM runs locally (its backend reaches the servers itself)."""
    generates = isinstance(task, GenerationTask)
    if generates and not generates_text(spec.backend):
        raise ConfigError(f"{spec.benchmark} generates text; backend {spec.backend!r} runs "
                          "tensors",
                          "use --backend openai --endpoint URL (a vLLM/SGLang/TGI server), or "
                          "--backend hf --model DIR (transformers, in this process)")
    if not generates and generates_text(spec.backend):
        raise ConfigError(f"backend {spec.backend!r} generates text; {spec.benchmark} needs a "
                          "tensor runtime", "use e.g. --backend onnxruntime, or an LLM "
                          "benchmark (llama3.1-8b, llama2-70b-99.9, deepseek-r1, gpt-oss-120b)")
    if generates and not spec.distribution.local:
        raise ConfigError(f"{spec.benchmark} runs from this process: --replicas and serve "
                          "nodes do not apply",
                          "give the LLM servers as --endpoint URL with --backend openai")


def build_local(spec: RunSpec, phase: PhaseHook | None = None, cpus: list[int] | None = None,
                threads: int | None = None, first: BackendBase | None = None
                ) -> tuple[Task, BackendBase]:
    """The task and the loaded, signature-checked backend a RunSpec names (used by a run's child
    process, by ``mlharness serve`` nodes and by Ray replicas); ``phase(name, allowance_s)``
    hears the steps.
    ``cpus``/``threads``: one instance of several (``--instances``), on that block of cores;
    ``first``: the first instance, whose loaded model a backend with ``load_shared`` shares."""

    phase = phase or (lambda name, allowance_s=0.0: None)
    phase("loading the dataset")
    task = create_task(spec.benchmark, task_options(spec))
    check_pairing(spec, task)
    phase("loading the model")
    backend = create_backend(spec.backend)
    model = model_of(spec, task)
    options = BackendOptions(threads=threads or spec.threads, precision=spec.precision,
                             device=spec.device, cache_dir=spec.cache_dir,
                             extra=backend_options(backend, spec.backend_option),
                             scenario=spec.scenario, batch_size=spec.batch_size,
                             instances=spec.instances, cpus=cpus or None,
                             task_inputs=list(task.model_inputs)
                             if isinstance(task, TensorTask) else [])
    shares = type(backend).shares_model  # instances call one model (pytorch)
    if first is not None and shares:
        assert isinstance(backend, Backend) and isinstance(first, Backend)
        backend.load_shared(first, options)
    else:
        # a backend that compiles at load (torch.compile) says how much longer it may take;
        # the user sees why the load takes minutes
        allowance = backend.load_allowance_s(options, model)
        if allowance:
            phase(COMPILE_PHASE, allowance)
        # an instance with a model of its own loads it on its own cores, so its weights land
        # in their NUMA node's memory; a shared model (and its compile workers) keeps them all
        with pinned(None if shares else cpus):
            backend.load(model, options)
    if isinstance(task, TensorTask) and isinstance(backend, Backend):
        check_signature(task.model_inputs, backend.inputs, str(model), spec.batch_size)
        ranges = task.index_ranges()
        # the other instances load the same file: its tables are known; and a task that feeds
        # no table indices need not read them (onnx's import alone is 1-2 s of every run)
        if first is None and ranges:
            check_index_ranges(ranges, backend.index_limits, str(model))
    return task, backend


def runtimes(task: Task, backends: list[BackendBase]) -> tuple[TensorTask, list[Backend]]:
    """The tensor task and the runtimes a batching engine runs it on (:func:`check_pairing`
    paired them when they were built)."""
    found = [b for b in backends if isinstance(b, Backend)]
    if len(found) != len(backends):
        raise ConfigError(f"{task.name} runs tensors: its backends must be tensor runtimes",
                          "use e.g. --backend onnxruntime")
    return tensor_task(task), found


def tensor_task(task: Task) -> TensorTask:
    """``task`` as the tensor task a batching engine, a serve node or a Ray replica runs (a
    generation task never gets there: :func:`check_pairing` keeps it local and streaming)."""
    if not isinstance(task, TensorTask):
        raise ConfigError(f"{task.name} is a {task.kind} task: it runs on a streaming backend "
                          "in the run's own process", "use --backend openai or hf")
    return task


def build_instances(spec: RunSpec, phase: PhaseHook | None = None
                    ) -> tuple[Task, list[BackendBase], Placement | None]:
    """``--instances N --threads-per-instance M``: the task, N backends each loaded for its own
    block of cores (sharing the first's model where the backend can), and the placement (None
    for the usual single backend)."""

    if spec.instances <= 1 and not spec.threads_per_instance:
        task, backend = build_local(spec, phase)
        return task, [backend], None
    placement = place(spec.instances, spec.threads_per_instance)
    instances: list[BackendBase] = []
    for k, cpus in enumerate(placement.cpus, 1):
        # every announced phase is progress for the stall clock; the name tells the user
        # which of the N instances is loading
        def instance_phase(name: str, allowance_s: float = 0.0, k: int = k) -> None:
            if phase is not None:
                phase(f"{name} (instance {k} of {len(placement.cpus)})", allowance_s)

        task, backend = build_local(spec, instance_phase, cpus, placement.threads,
                                    first=instances[0] if instances else None)
        instances.append(backend)
    placement.shared_model = len(instances) > 1 and type(instances[0]).shares_model
    return task, instances, placement


def task_options(spec: RunSpec) -> TaskOptions:
    """What the task of ``spec`` is built from."""

    if spec.cache_dir is not None:
        cache_root(spec.cache_dir)  # refuses a --cache-dir that is not a directory

    tokenizer = spec.backend_option.get("tokenizer")
    return TaskOptions(dataset=spec.dataset, model=spec.model, vocab=spec.vocab,
                       cache_dir=spec.cache_dir, max_samples=spec.max_samples,
                       extra=dict(spec.task_option),
                       model_inputs=declared_inputs(spec.backend, spec.model),
                       backend_tokenizer=Path(str(tokenizer)) if tokenizer else None)
