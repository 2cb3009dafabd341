"""A backend that computes nothing: zeros shaped like the batch. For overhead measurements only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mlharness.backends.base import Backend, BackendOptions
from mlharness.options import NoOptions
from mlharness.tensors import TensorSpec


class NoopBackend(Backend):
    name = "noop"
    options_model = NoOptions

    def load(self, model: Path | None, options: BackendOptions) -> None:
        """Nothing to open."""

    @property
    def inputs(self) -> list[TensorSpec] | None:
        return None  # no model: accepts whatever the task feeds

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = len(next(iter(inputs.values())))
        return {"output": np.zeros((n, 1), dtype=np.int64)}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}
