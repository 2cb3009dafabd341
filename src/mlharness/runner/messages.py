"""What a run's child process tells its parent, one typed message each (sent over a
multiprocessing queue; they pickle as plain dataclasses).

``Phase``: a new phase began (the parent's stall clock restarts, with the phase's allowance on
top of the stall timeout); ``Ready``: task, backend and batching are set up; ``Done``: LoadGen
finished; ``Failed``: the backend raised or the run stalled or died; ``UserError``: a
HarnessError (bad input found in the child); ``Crash``: anything else.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol

from mlharness.record import SutRecord


@dataclass(frozen=True)
class Phase:
    name: str
    allowance_s: float = 0.0  # time this phase may take beyond the stall timeout


@dataclass(frozen=True)
class Ready:
    task: dict[str, Any]
    backend: dict[str, Any]
    total: int
    performance_count: int
    sut: SutRecord  # how the engine runs the samples, as run.json records it


@dataclass(frozen=True)
class Done:
    completed: int
    batches: int
    warmup_s: float
    warmup_shapes: int
    failure: str | None = None
    backend_report: dict[str, Any] | None = None  # several replicas: who served what
    stream_report: dict[str, Any] | None = None  # a streaming backend's (sut.stream_report)


@dataclass
class Failed:
    """The run cannot go on: its record's ``error``."""

    message: str
    traceback: str = ""
    backend_report: dict[str, Any] | None = None
    phase: str | None = None  # the phase that stalled
    crash_log: str | None = None  # the threads' stacks of a worker that died
    stream_report: dict[str, Any] | None = None  # a streaming backend's (sut.stream_report)

    def to_error(self) -> dict[str, Any]:
        """run.json's ``error`` (empty fields left out)."""
        return {k: v for k, v in asdict(self).items()
                if v not in (None, "") and k != "stream_report"}


@dataclass(frozen=True)
class UserError:
    type: str
    message: str
    hint: str = ""
    traceback: str = ""

    def to_error(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Crash:
    message: str
    traceback: str = ""


Message = Phase | Ready | Done | Failed | UserError | Crash


class Channel(Protocol):
    """Where the child puts its messages (a multiprocessing queue the parent reads)."""

    def put(self, message: Message) -> None: ...


class Counter(Protocol):
    """A count shared with the parent (a ``multiprocessing.Value``), for its progress bar."""

    value: int
