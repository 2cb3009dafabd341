"""The Task protocol: what a benchmark knows (data, pre-processing, response encoding, accuracy).

A task never knows which backend runs it. The SUT engine asks it for batched model inputs and hands
it the model outputs to encode as LoadGen response bytes; the accuracy step hands it the decoded
``mlperf_log_accuracy.json`` entries.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

import numpy as np

from mlharness.errors import ConfigError
from mlharness.options import Options, parse_options
from mlharness.tensors import IndexRange, TensorSpec

__all__ = ["AccuracyResult", "IndexRange", "Progress", "Task", "TaskOptions", "TensorSpec"]

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

    def __post_init__(self) -> None:
        self.passed = (None if self.target is None
                       else self.value >= self.target and not self.failures)

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "value": self.value, "target": self.target,
                "passed": self.passed, "text": self.text, "details": self.details,
                "failures": self.failures}


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

    def parsed(self, model: type[O]) -> O:
        """``extra`` as the task's option model; unknown keys or bad values: ConfigError."""
        return parse_options(model, self.extra, "task option", "--task-option")


class Task(ABC):
    """One benchmark's data and metric."""

    #: benchmark name as users type it (``resnet50``, ``bert-99``, ``demo``)
    name: str = ""
    #: key used for mlperf.conf / user.conf lookups (``resnet50``, ``bert``, ``retinanet``)
    loadgen_model: str = ""
    #: numpy dtype name of one response element, for TEST01 verification (``--dtype``)
    response_dtype: str = "float32"
    #: model used when the user gives none (only the shipped demo has one)
    default_model: Path | None = None
    #: an attention model (quantisers keep its softmax/layer-norm paths in higher precision)
    transformer: bool = False

    @property
    @abstractmethod
    def model_inputs(self) -> list[TensorSpec]:
        """The inputs a model for this task must accept."""

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
    def batch_inputs(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
        """Stack loaded samples into one batch of model inputs."""

    @abstractmethod
    def encode_responses(
        self, indices: Sequence[int], outputs: dict[str, np.ndarray]
    ) -> list[bytes]:
        """Turn one batch of model outputs into one response payload per sample."""

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

    def index_ranges(self) -> dict[str, IndexRange]:
        """Integer inputs whose values index a table in the model, with the range fed; checked
        against the model's tables before a run. The default: none."""
        return {}

    def sample_length(self, index: int) -> int:
        """A cost hint for length-aware batching (e.g. sequence length). 0 = all equal."""
        return 0

    def warmup_batches(self, batch: list[int]) -> list[list[int]]:
        """The batches a warm-up runs, given one ``batch`` of the first sample: one per input
        shape the run will feed, so runtimes that build kernels per shape (OpenVINO, oneDNN's
        AMX kernels) build them before LoadGen starts; the runner loads every sample they name.
        The default: ``batch`` alone (every batch has the same shape)."""
        return [batch]

    def describe(self) -> dict[str, Any]:
        """Facts about the task worth keeping in run.json."""
        return {"name": self.name, "loadgen_model": self.loadgen_model,
                "response_dtype": self.response_dtype}
