"""Where a run's samples live: in this process (the task loads them and the backends run their
tensors) or on `mlharness serve` nodes / Ray replicas (a ``SampleBackend`` loads and runs them).
The run's worker asks :func:`sample_home` once instead of testing the backend at every step."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlharness.backends.base import Backend, SampleBackend
from mlharness.tasks.base import Task

#: samples per load call when nodes or replicas hold them (each call is progress for the stall
#: clock); in this process each sample is a call of its own
REMOTE_LOAD_CHUNK = 64


@dataclass(frozen=True)
class SampleHome:
    load: Callable[[list[int]], None]
    unload: Callable[[list[int]], None]
    load_chunk: int  # samples per load call
    concurrency: int  # batches to keep in flight when the user gave no --workers
    sut_name: str | None  # what LoadGen logs as sut_name (None: the in-process SUT)
    report: Callable[[], dict[str, Any] | None]  # for run.json: who served what
    close: Callable[[], None]
    local: bool  # tensors run in this process (their shapes can be recorded in flight)


def sample_home(task: Task, backend: Backend | SampleBackend) -> SampleHome:
    """The home of the samples for a run of ``task`` on ``backend`` (or a pool of them)."""
    if isinstance(backend, SampleBackend):
        return SampleHome(backend.load_samples, backend.unload_samples, REMOTE_LOAD_CHUNK,
                          backend.concurrency, backend.sut_name, backend.report, backend.close,
                          local=False)
    return SampleHome(task.load_samples, task.unload_samples, 1, 1, None, lambda: None,
                      lambda: None, local=True)
