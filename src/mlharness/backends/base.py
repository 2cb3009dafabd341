"""The kinds of backend: a tensor runtime (:class:`Backend`: a batch of inputs into outputs) and
a streaming text generator (:class:`StreamingBackend`), both declaring their capabilities on
:class:`BackendBase` (typed class attributes with defaults, never found by ``getattr``).

A backend never knows which benchmark it serves. It is loaded once per worker process, checked
against the task's declared inputs, then called from the SUT engine's worker threads.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Protocol, TypeGuard, TypeVar, runtime_checkable

import numpy as np

from mlharness.backends.quantised import Quantiser
from mlharness.errors import ModelError
from mlharness.names import DEFAULT_PRECISION, Precision, Scenario
from mlharness.options import FreeOptions, Options, parse_options
from mlharness.prompts import GenerationRequest
from mlharness.tensors import IndexRange, TensorSpec

O = TypeVar("O", bound=Options)


@dataclass
class BackendOptions:
    """Runtime settings a user may give, and what the harness tells every backend about the run.
    ``extra`` is the user's ``--backend-option`` table, typed: the backend's ``options_model``
    (checked, defaults filled in by :func:`mlharness.backends.backend_options`), or
    :class:`FreeOptions` for a backend that declares none (a plain mapping given here becomes
    one). A backend reads its keys with :meth:`extra_as`."""

    threads: int | None = None  # intra-op threads; None = runtime default
    precision: Precision = DEFAULT_PRECISION  # never changed silently
    device: str = "cpu"
    extra: Options = field(default_factory=FreeOptions)
    cache_dir: Path | None = None  # where derived models (e.g. int8) are cached
    scenario: str | None = None  # the LoadGen scenario (e.g. OpenVINO's performance hint)
    batch_size: int | None = None  # the run's --batch-size (None: the engine's default)
    instances: int = 1  # the run's --instances (each calls this model from its own thread)
    #: one instance of several (``--instances``): the block of cores it runs on
    cpus: list[int] | None = None
    #: what the task feeds the model (e.g. a backend that builds its model names the input)
    task_inputs: list[TensorSpec] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.extra, Options):
            self.extra = FreeOptions(**dict(self.extra))

    def extra_as(self, model: type[O]) -> O:
        """The ``--backend-option`` keys as ``model``: ``extra`` itself when the backend declared
        ``model``, else the keys ``model`` knows, checked by it (a subclass of a built-in backend
        that declares no model of its own keeps its other keys to itself)."""
        if isinstance(self.extra, model):
            return self.extra
        table = {k: v for k, v in self.extra.model_dump().items() if k in model.model_fields}
        return parse_options(model, table, "backend option", "--backend-option")


class BackendBase(ABC):
    """What every backend declares on its class, read before (or without) loading it; each has
    a default here, so a backend states only what differs."""

    name: ClassVar[str] = ""
    #: its ``--backend-option`` keys; None: it receives the table as given (:class:`FreeOptions`)
    options_model: ClassVar[type[Options] | None] = None
    #: the catalogue framework of the model files it reads (``run`` takes the benchmark's model
    #: of that framework from the cache); None: no model from the cache
    model_framework: ClassVar[str | None] = None
    #: how ``mlharness calibrate`` makes its int8 model; None: it does not quantise
    quantiser: ClassVar[Quantiser | None] = None
    #: the environment a process started to run it needs from its start (Ray actors, whose
    #: threads start before they know it)
    process_env: ClassVar[Mapping[str, str]] = {}
    #: streams generated tokens (a :class:`StreamingBackend`); False: runs tensors
    generates: ClassVar[bool] = False
    #: ``--instances`` call the first instance's loaded model (:meth:`Backend.load_shared`)
    #: instead of loading (and compiling) a copy each
    shares_model: ClassVar[bool] = False
    #: ``predict`` is trivial: no native runtime (a process death names no shapes in flight)
    #: and cheaper than handing a batch to a worker thread, so the engine calls it on LoadGen's
    #: issue thread in every scenario (the no-op backend; docs/performance.md, harness overhead)
    inline: ClassVar[bool] = False
    #: its ``--model`` is a file on this machine (a missing one is refused before anything
    #: runs: :meth:`model_file`); what to pass when none is given
    reads_model_file: ClassVar[bool] = False
    model_hint: ClassVar[str] = "pass --model PATH (the model file)"

    @classmethod
    def model_file(cls, model: Path | None) -> Path:
        """``model`` as the path of an existing file; ModelError saying what to pass if not."""
        if model is None:
            raise ModelError("no model given", hint=cls.model_hint)
        path = Path(model)
        if not path.is_file():
            raise ModelError(f"model file not found: {path}", hint="check the --model path")
        return path

    @classmethod
    def declared_inputs(cls, model: Path) -> list[TensorSpec] | None:
        """The inputs ``model`` declares, read cheaply before any run (tasks adapt to them, e.g.
        BERT's sequence length); None: cannot tell."""
        return None

    @classmethod
    def framework(cls) -> str | None:
        """The framework name and version, for the system description; None: unknown."""
        return None

    @classmethod
    def prepare_process(cls) -> None:
        """What it needs of a run's worker process before any other thread starts (OpenVINO:
        one malloc arena). The default: nothing."""

    def load_allowance_s(self, options: BackendOptions, model: Path | None) -> float:
        """Seconds :meth:`load` may take beyond the stall timeout with these options and this
        model file (compiling the model); the default: none."""
        return 0.0

    @abstractmethod
    def load(self, model: Path | None, options: BackendOptions) -> None:
        """Open the model. Raise ModelError for a missing or unreadable model."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Versions and settings worth keeping in run.json."""

    def close(self) -> None:
        """Release threads, sessions and connections; the default: nothing to release."""


class Backend(BackendBase):
    """A tensor runtime: named input arrays in, named output arrays out (one call of
    ``predict`` is what a :class:`~mlharness.tasks.base.TensorTask`'s inference seam calls)."""

    @property
    @abstractmethod
    def inputs(self) -> list[TensorSpec] | None:
        """What the loaded model accepts; None: anything (a backend without a model)."""

    @abstractmethod
    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one batch; return outputs by name."""

    @property
    def index_limits(self) -> dict[str, int]:
        """``{input: rows}`` of the tables the loaded model's integer inputs index (checked
        against the task's :class:`IndexRange`s); the default: none known."""
        return {}

    def load_shared(self, first: Backend, options: BackendOptions) -> None:
        """Load as another instance of the loaded backend ``first`` (only where the class
        declares ``shares_model``)."""
        raise NotImplementedError(f"{self.name} does not share a loaded model")


@runtime_checkable
class SampleBackend(Protocol):
    """A backend that holds the dataset itself (``mlharness serve`` nodes, Ray replicas).

    LoadGen's sample loads go to it instead of the local task, and the engine hands it sample
    indices, getting back responses already in the task's encoding.
    """

    #: batches the engine should keep in flight when the user gave no --workers
    concurrency: int
    @property
    def sut_name(self) -> str | None:
        """The name LoadGen logs as ``sut_name``; None keeps the ordinary in-process SUT."""

    def load_samples(self, indices: list[int]) -> None: ...

    def unload_samples(self, indices: list[int]) -> None: ...

    def run_indices(self, indices: list[int]) -> list[bytes]:
        """One response payload per sample, in the task's encoding."""

    def warm_up(self, batches: int, indices: list[int]) -> None:
        """Run ``batches`` untimed batches of the loaded ``indices`` on every replica."""

    def report(self) -> dict[str, Any]:
        """What happened during the run (replicas lost, failovers, restarts) for run.json."""

    def close(self) -> None: ...


#: called by a text-generation backend, from any thread: at the first token(s) (their ids), at
#: the end (every output id; ``n_tokens`` is ``len(ids)``), or on a failure (one line)
OnFirst = Callable[[list[int]], None]
OnDone = Callable[[list[int]], None]
OnError = Callable[[str], None]


@dataclass(frozen=True)
class IssuePattern:
    """How LoadGen will issue a test's queries, told to a streaming backend after the warm-up
    and before the test: every sample at once (Offline), one query at a time (SingleStream:
    the next after the last answer) or paced at ``target_qps`` (Server, Interactive).
    ``request_s``: one request's seconds, timed by the warm-up (None: no warm-up ran)."""

    all_at_once: bool
    sequential: bool = False
    target_qps: float | None = None
    request_s: float | None = None

    @classmethod
    def of(cls, scenario: str, target_qps: float | None = None,
           request_s: float | None = None) -> IssuePattern:
        """The pattern of ``scenario``'s test (``target_qps``: LoadGen's, for a paced one)."""
        if scenario == Scenario.OFFLINE:
            return cls(all_at_once=True, request_s=request_s)
        if scenario == Scenario.SINGLE_STREAM:
            return cls(all_at_once=False, sequential=True, request_s=request_s)
        return cls(all_at_once=False, target_qps=target_qps, request_s=request_s)


class StreamingBackend(BackendBase):
    """A text-generation runtime that streams tokens (an OpenAI-compatible server, an in-process
    ``transformers`` model): the backend of a :class:`~mlharness.tasks.base.GenerationTask`.

    ``submit`` returns at once; the backend calls ``on_first`` when the first token exists and
    then exactly one of ``on_done`` / ``on_error``, from a thread of its own. ``concurrency`` is
    how many requests it keeps in flight (more wait inside it, in order)."""

    generates: ClassVar[bool] = True
    concurrency: int = 1

    @abstractmethod
    def submit(self, request: GenerationRequest, on_first: OnFirst, on_done: OnDone,
               on_error: OnError) -> None: ...

    @abstractmethod
    def close(self) -> None:
        """Finish or cancel what is in flight and release threads and connections."""

    def issue_pattern(self, pattern: IssuePattern) -> None:
        """Told before the test how LoadGen will issue, for a backend that sizes its
        concurrency or its connections by it."""

    def progress(self) -> int:
        """A count that grows while the backend streams (events or tokens received), read by
        the run's stall clock: requests in flight and streaming are progress before any
        completes. 0: not told (completions alone count)."""
        return 0

    def report(self) -> dict[str, Any]:
        """What happened during the run (requests per server, how many were in flight) for
        run.json's ``sut.stream_report``; empty: nothing to tell."""
        return {}

    def sends(self, request: GenerationRequest) -> str | None:
        """In words, the form ``request`` goes to the model in (token ids, text, chat messages
        and where), for run.json; None: not told."""
        return None


def is_streaming(backend: object) -> TypeGuard[StreamingBackend]:
    """Whether ``backend`` generates text token by token (the streaming SUT path)."""
    return isinstance(backend, StreamingBackend)


def check_signature(expected: list[TensorSpec], actual: list[TensorSpec] | None, model: str,
                    batch_size: int | None = None) -> None:
    """Raise ModelError when the model's inputs differ from what the task feeds it, or when an
    explicit ``batch_size`` exceeds the batch the model was exported with."""
    if actual is None:
        return
    have = {t.name: t for t in actual}
    missing = [t.name for t in expected if t.name not in have]
    if missing:
        raise ModelError(
            f"model {model} has inputs {sorted(have)}, but the task feeds {[t.name for t in expected]}",
            hint="export the model with the official input names, or pick the matching --benchmark",
        )
    for want in expected:
        got = have[want.name]
        if got.dtype != want.dtype:
            raise ModelError(
                f"model input {want.name!r} is {got.dtype}, the task feeds {want.dtype}",
                hint="re-export the model with the official input dtype",
            )
        if len(got.shape) != len(want.shape) or any(
            w is not None and g is not None and w != g for w, g in zip(want.shape, got.shape)
        ):
            raise ModelError(
                f"model input {want.name!r} has shape {list(got.shape)}, the task feeds "
                f"{list(want.shape)} (None = any)",
                hint="check that the model matches this benchmark's input size and layout",
            )
    fixed = fixed_batch(actual)
    if batch_size is not None and fixed is not None and batch_size > fixed:
        raise ModelError(f"--batch-size {batch_size} exceeds the model's fixed batch of {fixed}",
                         hint=f"use --batch-size {fixed} or less, or export the model with a "
                              "free batch dimension")


def check_index_ranges(ranges: dict[str, IndexRange], limits: dict[str, int],
                       model: str) -> None:
    """Raise ModelError when the task feeds an input values past the rows of the table the
    model indexes with it (a vocab larger than the model's embeddings)."""
    for name, fed in ranges.items():
        rows = limits.get(name)
        if rows is not None and fed.values > rows:
            raise ModelError(f"the task feeds {name} up to {fed.values - 1} ({fed.source}), but "
                             f"model {model} indexes a table of {rows} rows with it",
                             hint=fed.hint)


def fixed_batch(inputs: list[TensorSpec] | None) -> int | None:
    """The batch size a model was exported with, when all its inputs fix the same one."""
    fixed = {t.shape[0] for t in inputs or [] if t.shape and t.shape[0] is not None}
    return fixed.pop() if len(fixed) == 1 else None
