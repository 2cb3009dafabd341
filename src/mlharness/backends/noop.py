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
    inline = True  # nothing native, nothing to wait for: no thread hop

    def __init__(self) -> None:
        self._zeros: dict[int, np.ndarray] = {}  # batch size -> its (read-only) answer

    def load(self, model: Path | None, options: BackendOptions) -> None:
        """Nothing to open."""

    @property
    def inputs(self) -> list[TensorSpec] | None:
        return None  # no model: accepts whatever the task feeds

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = len(next(iter(inputs.values())))
        out = self._zeros.get(n)
        if out is None:  # one array per batch size: a fresh one cost more than the harness
            out = self._zeros[n] = np.zeros((n, 1), dtype=np.int64)
            out.flags.writeable = False
        return {"output": out}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}
