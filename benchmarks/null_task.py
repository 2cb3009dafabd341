"""A task with no data and no work, for measuring the harness's own overhead."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from mlharness.tasks.base import AccuracyResult, TaskOptions, TensorSpec, TensorTask

_ONE = np.zeros(1, dtype=np.float32).tobytes()
_ZEROS: dict[int, np.ndarray] = {}


class NullTask(TensorTask):
    name = "null"
    loadgen_model = "null"

    @property
    def model_inputs(self) -> list[TensorSpec]:
        return [TensorSpec("x", "float32", (None, 1))]

    def total_count(self) -> int:
        return 1024

    def performance_count(self) -> int:
        return 1024

    def load_samples(self, indices: Sequence[int]) -> None:
        pass

    def unload_samples(self, indices: Sequence[int]) -> None:
        pass

    def batch_inputs(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
        # one read-only array per batch size: a fresh one would cost more than the harness
        x = _ZEROS.get(len(indices))
        if x is None:
            x = _ZEROS[len(indices)] = np.zeros((len(indices), 1), dtype=np.float32)
            x.flags.writeable = False
        return {"x": x}

    def encode_responses(self, indices, outputs) -> list[bytes]:
        return [_ONE] * len(indices)

    def score(self, entries) -> AccuracyResult:
        return AccuracyResult("none", 0.0, "")


def create(name: str, options: TaskOptions) -> NullTask:
    return NullTask()
