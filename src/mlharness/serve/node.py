"""What a node holds: the task (dataset), the backend, the samples LoadGen asked it to load."""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

from mlharness.spec import RunSpec


class Node:
    """One SUT node's work, independent of the HTTP server around it."""

    def __init__(self, spec: RunSpec, name: str | None = None) -> None:
        from mlharness.runner.worker import build_local

        self.spec = spec
        self.name = name or socket.gethostname()
        self.task, self.backend = build_local(spec)
        self._loaded: set[int] = set()
        self._lock = threading.Lock()
        self.started = time.time()
        self.batches = 0
        self.samples = 0
        self.late_loads = 0  # samples run without a load first (after a node restart)

    def prepare(self) -> None:
        """Build the task's caches (pre-processed samples) before serving."""
        self.task.prepare(None)

    @property
    def total(self) -> int:
        return self.task.total_count()

    def load(self, indices: list[int]) -> None:
        with self._lock:
            todo = [i for i in indices if i not in self._loaded]
            self._loaded.update(todo)
        if todo:
            self.task.load_samples(todo)

    def unload(self, indices: list[int]) -> None:
        with self._lock:
            gone = [i for i in indices if i in self._loaded]
            self._loaded.difference_update(gone)
        if gone:
            self.task.unload_samples(gone)

    def predict(self, indices: list[int]) -> list[bytes]:
        """Run one batch of sample indices; responses in the task's encoding."""
        with self._lock:
            missing = [i for i in dict.fromkeys(indices) if i not in self._loaded]
        if missing:  # a node that joined or restarted after LoadGen loaded its samples
            self.late_loads += len(missing)
            self.load(missing)
        outputs = self.backend.predict(self.task.batch_inputs(indices))
        payloads = self.task.encode_responses(indices, outputs)
        if len(payloads) != len(indices):
            raise RuntimeError(f"task encoded {len(payloads)} responses for {len(indices)} samples")
        self.batches += 1
        self.samples += len(indices)
        return payloads

    def describe(self) -> dict[str, Any]:
        return {"node": self.name, "benchmark": self.spec.benchmark, "total": self.total,
                "performance_count": self.task.performance_count(),
                "inputs": [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape)}
                           for t in self.task.model_inputs],
                "backend": self.backend.describe(), "pid": os.getpid(),
                "host": socket.gethostname()}

    def stats(self) -> dict[str, Any]:
        return {"batches": self.batches, "samples": self.samples, "late_loads": self.late_loads,
                "loaded": len(self._loaded), "uptime_s": round(time.time() - self.started, 3)}
