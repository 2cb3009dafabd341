"""The kinds of task: what a benchmark knows (data, pre-processing, response encoding, accuracy).

Every benchmark is a :class:`Task` of one kind. A :class:`TensorTask` feeds arrays to a runtime
backend (onnxruntime, OpenVINO, PyTorch) and decides, in :meth:`TensorTask.infer` (the inference
seam), how a batch of samples becomes backend calls: one call for ResNet50, many windows for
3D-UNet. A :class:`GenerationTask` hands each sample to a streaming backend (an OpenAI-compatible
server, ``transformers`` in process) as a :class:`~mlharness.prompts.GenerationRequest` and
encodes the generated token ids as the LoadGen response. A task never knows which backend runs
it; the accuracy step hands it the decoded ``mlperf_log_accuracy.json`` entries.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, Sequence, TypeVar

import numpy as np

from mlharness.errors import ConfigError
from mlharness.options import Options, parse_options
from mlharness.prompts import GenerationRequest
from mlharness.rules import BenchmarkRules, Generation
from mlharness.tensors import IndexRange, Predict, TensorSpec

__all__ = ["AccuracyResult", "GenerationTask", "IndexRange", "Predict", "Progress", "Task",
           "TaskOptions", "TensorSpec", "TensorTask"]

O = TypeVar("O", bound=Options)

#: progress callback: (done, total, label)
Progress = Callable[[int, int, str], None]


@dataclass
class AccuracyResult:
    """A scored accuracy run.

    ``value`` is in percent (as the official scripts print it); ``text`` is what goes into
    ``accuracy.txt``, in the official script's format so the submission checker's regex matches.
    """

    metric: str
    value: float
    text: str
    target: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    #: ``value >= target`` and no other bound failed (None without a target); decided here: a
    #: value given is ignored
    passed: bool | None = None
    #: other bounds the run failed, each in words (an LLM's ROUGE-2, its generated length)
    failures: list[str] = field(default_factory=list)
    #: how the result screen shows the score where the metric's name says little (whisper's
    #: ``ACCURACY`` is 100 - WER: ``WER 2.067% (<= 3.046%)``); None: ``metric value% (>= target)``
    shown: str | None = None

    def __post_init__(self) -> None:
        self.passed = (None if self.target is None
                       else self.value >= self.target and not self.failures)

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "value": self.value, "target": self.target,
                "passed": self.passed, "text": self.text, "details": self.details,
                "failures": self.failures, "shown": self.shown}


@dataclass
class TaskOptions:
    """What a user may give a task: file locations and limits (tasks ignore what they do not
    use) and the ``--task-option`` table, which each task checks with its own :class:`Options`
    model (:meth:`parsed`)."""

    dataset: Path | None = None
    model: Path | None = None
    vocab: Path | None = None
    cache_dir: Path | None = None
    max_samples: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: the inputs the model file declares, as its backend reads them (None: unknown)
    model_inputs: list[TensorSpec] | None = None
    #: the round the run counts for (None: the newest that describes the benchmark)
    round: str | None = None
    #: the rules the benchmark runs under (``create_task`` fills them in from its entry)
    rules: BenchmarkRules | None = None
    #: the model's tokenizer directory as the backend was given it (an LLM server's text is
    #: tokenized with it): a generation task scores with it when given none of its own
    backend_tokenizer: Path | None = None

    def parsed(self, model: type[O]) -> O:
        """``extra`` as the task's option model; unknown keys or bad values: ConfigError."""
        return parse_options(model, self.extra, "task option", "--task-option")

    def require_rules(self, benchmark: str) -> BenchmarkRules:
        """The rules an MLPerf task runs under; a one-line error when it has none."""
        if self.rules is None:
            raise ConfigError(f"{benchmark} has no round rules",
                              "give its [tasks.NAME] entry a rules = \"<round benchmark>\" "
                              "(docs/architecture.md, \"Add a benchmark\")")
        return self.rules


class Task(ABC):
    """One benchmark's data and metric: what every kind of task has."""

    #: benchmark name as users type it (``resnet50``, ``bert-99``, ``demo``)
    name: str = ""
    #: key used for mlperf.conf / user.conf lookups (``resnet50``, ``bert``, ``retinanet``)
    loadgen_model: str = ""
    #: numpy dtype name of one response element, for TEST01 verification (``--dtype``)
    response_dtype: str = "float32"
    #: model used when the user gives none (only the shipped demo has one)
    default_model: Path | None = None
    #: the kind, as run.json and errors name it (``tensor`` or ``generation``)
    kind: ClassVar[str] = ""
    #: the round's rules it runs under (None: the demo, a task of your own)
    rules: BenchmarkRules | None = None

    @abstractmethod
    def total_count(self) -> int:
        """Number of samples in the dataset (the QSL total count)."""

    @abstractmethod
    def performance_count(self) -> int:
        """Samples that fit in memory at once (the QSL performance count)."""

    @abstractmethod
    def load_samples(self, indices: Sequence[int]) -> None:
        """Bring these samples into memory (LoadGen's load_query_samples)."""

    @abstractmethod
    def unload_samples(self, indices: Sequence[int]) -> None:
        """Drop these samples from memory."""

    @abstractmethod
    def score(self, entries: list[tuple[int, bytes]]) -> AccuracyResult:
        """Score ``(qsl_idx, response bytes)`` pairs from an accuracy log."""

    def loadgen_model_for(self, scenario: str) -> str:
        """The mlperf.conf / user.conf model key of ``scenario``; only the LLM benchmarks have an
        Interactive scenario (their own key, ``<model>-interactive``)."""
        if scenario == "Interactive":
            raise ConfigError(f"{self.name} has no Interactive scenario",
                              "Interactive is an LLM scenario (e.g. -b llama3.1-8b); use Server")
        return self.loadgen_model

    def prepare(self, progress: Progress | None = None) -> None:
        """Build on-disk caches (pre-processed samples, features) before LoadGen starts.

        Runs in the parent process, so ``progress(done, total, label)`` can be shown to the user.
        The default does nothing.
        """

    def sample_length(self, index: int) -> int:
        """A cost hint for length-aware batching (e.g. sequence length). 0 = all equal."""
        return 0

    def check_scoring(self) -> None:
        """Raise a HarnessError when :meth:`score` could not score this run's log (a missing
        tokenizer or package), so an accuracy run is refused before its first sample rather
        than after its last. The default has nothing to check."""

    def describe(self) -> dict[str, Any]:
        """Facts about the task worth keeping in run.json."""
        return {"name": self.name, "kind": self.kind, "loadgen_model": self.loadgen_model,
                "response_dtype": self.response_dtype,
                "rules": self.rules.name if self.rules is not None else None}


class TensorTask(Task):
    """A benchmark whose samples are arrays that a runtime backend turns into outputs."""

    kind = "tensor"
    #: an attention model (quantisers keep its softmax/layer-norm paths in higher precision)
    transformer: bool = False
    #: the most samples one :meth:`infer` call takes unless ``--batch-size`` says (None: the
    #: scenario's default); 1 where a sample is already many backend calls (3D-UNet's windows),
    #: so each completes when it is done instead of with a batch of them
    samples_per_call: int | None = None

    @property
    @abstractmethod
    def model_inputs(self) -> list[TensorSpec]:
        """The inputs a model for this task must accept."""

    @abstractmethod
    def batch_inputs(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
        """Stack loaded samples into one batch of model inputs."""

    @abstractmethod
    def encode_responses(
        self, indices: Sequence[int], outputs: dict[str, np.ndarray]
    ) -> list[bytes]:
        """Turn one batch of model outputs into one response payload per sample."""

    def infer(self, predict: Predict, indices: Sequence[int]) -> list[bytes]:
        """The inference seam: how the loaded samples ``indices`` become backend calls
        (``predict``: one call of the runtime) and one response payload each. The engine, a
        network node and the warm-up all run samples through here. The default: one call for
        the whole batch; a task whose sample needs many calls (windows of a volume) overrides
        it, and :meth:`model_batches` with it."""
        return self.encode_responses(indices, predict(self.batch_inputs(indices)))

    def model_batches(self, indices: Sequence[int]) -> Iterator[dict[str, np.ndarray]]:
        """The model inputs :meth:`infer` feeds for ``indices``, call by call (what a
        quantiser calibrates on). The default: the one batch."""
        yield self.batch_inputs(indices)

    def index_ranges(self) -> dict[str, IndexRange]:
        """Integer inputs whose values index a table in the model, with the range fed; checked
        against the model's tables before a run. The default: none."""
        return {}

    def kept_fp32(self, ops: list[tuple[str, str]]) -> list[str]:
        """Names among the model's operations ``(name, type)`` that ``mlharness calibrate``
        keeps in fp32, beside each quantiser's own choice. The default: none."""
        return []

    def warmup_batches(self, batch: list[int]) -> list[list[int]]:
        """The batches a warm-up runs, given one ``batch`` of the first sample: one per input
        shape the run will feed, so runtimes that build kernels per shape (OpenVINO, oneDNN's
        AMX kernels) build them before LoadGen starts; the runner loads every sample they name.
        The default: ``batch`` alone (every batch has the same shape)."""
        return [batch]


class GenerationTask(Task):
    """A benchmark whose samples are requests to a streaming text-generation backend; the
    backend streams token ids back, the first of them and the whole answer go to LoadGen."""

    kind = "generation"
    response_dtype = "int32"
    rules: BenchmarkRules  # take_rules sets them
    count: int  # the data set's samples, as the task reads them

    def take_rules(self, name: str, options: TaskOptions) -> Generation:
        """Become benchmark ``name`` of the rules ``options`` carry (name, rules, LoadGen key)
        and return their sampling; rules without a ``[generation]`` table: ConfigError."""
        self.name = name
        rules = self.rules = options.require_rules(name)
        if rules.generation is None:
            raise ConfigError(f"{name}'s rules ({rules.name}) describe no generation",
                              "its [benchmarks] table needs a [generation] table (the "
                              "reference's sampling)")
        self.loadgen_model = rules.loadgen_model
        return rules.generation

    def total_count(self) -> int:
        return self.count

    def performance_count(self) -> int:
        return min(self.count, self.rules.performance_sample_count)

    def loadgen_model_for(self, scenario: str) -> str:
        return self.rules.loadgen_model_for(scenario)  # Interactive: the LLMs' own key

    @abstractmethod
    def request(self, index: int) -> GenerationRequest:
        """Sample ``index`` as one generation request (prompt and sampling)."""

    def encode_output(self, index: int, ids: Sequence[int]) -> bytes:
        """The LoadGen response of sample ``index``'s answer: its generated token ids, a
        :class:`~mlharness.prompts.Generated` where the backend also has the text (its
        ``n_tokens`` is LoadGen's). The default: the ids as int32, as every reference LLM SUT
        logs them."""
        return np.asarray(ids, dtype=np.int32).tobytes()
