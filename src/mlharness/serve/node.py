"""What a node holds: the task (dataset), the backend, the samples each run asked it to load."""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

from mlharness.spec import RunSpec
from mlharness.sut.assemble import build_local, runtimes


class Node:
    """One SUT node's work, independent of the HTTP server around it.

    Runs sharing a node are kept apart: each run (the id its client sends; "" without one) has
    its own set of loaded samples, and a sample leaves the task's memory only when no run holds
    it, so one run's unload never pulls a sample from under another run's batch.
    """

    def __init__(self, spec: RunSpec, name: str | None = None) -> None:
        self.spec = spec
        self.name = name or socket.gethostname()
        task, backend = build_local(spec)
        self.task, [self.backend] = runtimes(task, [backend])
        self._held: dict[str, set[int]] = {}  # run id -> samples it loaded
        self._refs: dict[int, int] = {}  # sample -> runs holding it (in the task while > 0)
        self._lock = threading.RLock()
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

    def load(self, indices: list[int], run: str = "") -> None:
        with self._lock:
            held = self._held.setdefault(run, set())
            new = [i for i in dict.fromkeys(indices) if i not in held]
            todo = [i for i in new if not self._refs.get(i)]
            if todo:
                self.task.load_samples(todo)
            held.update(new)
            for i in new:
                self._refs[i] = self._refs.get(i, 0) + 1

    def unload(self, indices: list[int], run: str = "") -> None:
        with self._lock:
            held = self._held.get(run, set())
            gone = [i for i in dict.fromkeys(indices) if i in held]
            held.difference_update(gone)
            if not held:
                self._held.pop(run, None)
            todo = []
            for i in gone:
                self._refs[i] -= 1
                if not self._refs[i]:
                    del self._refs[i]
                    todo.append(i)
            if todo:
                self.task.unload_samples(todo)

    def release(self, run: str = "") -> None:
        """Unload whatever ``run`` still holds (a run that ended without unloading)."""
        with self._lock:
            held = sorted(self._held.get(run, ()))
        if held:
            self.unload(held, run)

    def predict(self, indices: list[int], run: str = "") -> list[bytes]:
        """Run one batch of sample indices; responses in the task's encoding."""
        with self._lock:
            held = self._held.get(run, set())
            missing = [i for i in dict.fromkeys(indices) if i not in held]
            if missing:  # a node that joined or restarted after LoadGen loaded its samples
                self.late_loads += len(missing)
                self.load(missing, run)
        payloads = self.task.infer(self.backend.predict, indices)
        if len(payloads) != len(indices):
            raise RuntimeError(f"task encoded {len(payloads)} responses for {len(indices)} samples")
        with self._lock:
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
        with self._lock:
            loaded, runs = len(self._refs), len(self._held)
        return {"batches": self.batches, "samples": self.samples, "late_loads": self.late_loads,
                "loaded": loaded, "runs": runs, "uptime_s": round(time.time() - self.started, 3)}
