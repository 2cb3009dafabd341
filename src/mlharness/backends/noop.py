"""A backend that computes nothing: zeros shaped like the batch. For overhead measurements only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mlharness.backends.base import BackendOptions
from mlharness.tasks.base import TensorSpec


class NoopBackend:
    name = "noop"

    def __init__(self, expected: list[TensorSpec] | None = None) -> None:
        self._inputs = expected or []

    def load(self, model: Path | None, options: BackendOptions) -> None:
        self._inputs = options.extra.get("task_inputs", self._inputs)

    @property
    def inputs(self) -> list[TensorSpec]:
        return self._inputs

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = len(next(iter(inputs.values())))
        return {"output": np.zeros((n, 1), dtype=np.int64)}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}
