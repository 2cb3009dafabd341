"""Test-only backends for the compliance tests: the demo model behind a fixed delay, a SUT that
caches, and a SUT whose answers change in the audit run.

They wrap the real onnxruntime backend, so responses are real model outputs. A run's backend is
created in the run's child process; it is named by import path (``--backend
compliance_backends:CachingBackend``), which imports there because ``conftest.py`` puts tests/
on ``sys.path`` and spawned children inherit it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.backends.base import BackendOptions
from mlharness.backends.onnxruntime import OnnxRuntimeBackend, OnnxRuntimeOptions


class DelayOptions(OnnxRuntimeOptions):
    delay_ms: float = 1.0
    perturb: int = 0
    perturb_every: int = 1


class CachingOptions(DelayOptions):
    cache_size: int = 8


def _shift(values: np.ndarray) -> np.ndarray:
    """Class ids + 1, or class scores rotated by one."""
    if np.issubdtype(values.dtype, np.integer):
        return values + 1
    return np.roll(values, 1, axis=-1)


class DelayBackend(OnnxRuntimeBackend):
    """The demo model plus ``delay_ms`` per sample (stable latencies on a busy machine).

    ``perturb=1`` shifts the predicted class of every ``perturb_every``-th sample (default every
    one) by one, as when a SUT runs a different code path in performance runs.
    """

    name = "test-delay"
    options_model = DelayOptions

    def load(self, model: Path | None, options: BackendOptions) -> None:
        super().load(model, options)
        opts = options.extra_as(DelayOptions)
        self.delay_s = opts.delay_ms / 1000.0
        self.perturb, self.perturb_every = bool(opts.perturb), opts.perturb_every
        self.seen = 0

    def sample_delay(self, inputs: dict[str, np.ndarray]) -> float:
        return self.delay_s * len(next(iter(inputs.values())))

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        # the delay is a deadline, not extra time: the model's own (load-dependent) time hides
        # inside it, so a batch takes the same time on a busy machine as on an idle one
        deadline = time.perf_counter() + self.sample_delay(inputs)
        outputs = super().predict(inputs)
        rest = deadline - time.perf_counter()
        if rest > 0:
            time.sleep(rest)
        if self.perturb:
            n = len(next(iter(outputs.values())))
            rows = [i for i in range(n) if (self.seen + i) % self.perturb_every == 0]
            self.seen += n
            outputs = {k: v.copy() for k, v in outputs.items()}
            for v in outputs.values():
                v[rows] = _shift(v[rows])
        return outputs

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "name": self.name, "delay_s": self.delay_s,
                "perturb": self.perturb}


class CachingBackend(DelayBackend):
    """Pays the delay only for inputs it has not seen lately: a small LRU cache of inputs
    (``cache_size``, default 8), so repeated samples come back at once while a run over the
    whole performance set (450 demo samples, drawn at random) still mostly misses."""

    name = "test-caching"
    options_model = CachingOptions

    def load(self, model: Path | None, options: BackendOptions) -> None:
        super().load(model, options)
        self.cache_size = options.extra_as(CachingOptions).cache_size
        self.recent: OrderedDict[bytes, None] = OrderedDict()

    def sample_delay(self, inputs: dict[str, np.ndarray]) -> float:
        batch = next(iter(inputs.values()))
        new = 0
        for row in batch:
            key = row.tobytes()
            if key in self.recent:
                self.recent.move_to_end(key)
                continue
            new += 1
            self.recent[key] = None
            if len(self.recent) > self.cache_size:
                self.recent.popitem(last=False)
        return self.delay_s * new
