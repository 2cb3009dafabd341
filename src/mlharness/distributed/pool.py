"""Dispatch batches to several replicas (network nodes or Ray actors): least outstanding work
first (on a tie, the one that has served fewest samples, so batches sent one at a time take turns
instead of all going to the first), a replica that dies or stalls is named, and with failover its
batch goes to the others.

A replica raises :class:`ReplicaDown` when it is gone (connection refused or reset, no answer
within the timeout, actor died); any other exception is a backend error and fails the run as an
in-process backend error would.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from mlharness.spec import RunSpec
from mlharness.tensors import TensorSpec


class ReplicaDown(Exception):
    """The replica is gone or stalled; the message says how."""


class ReplicaFailed(RuntimeError):
    """A replica was lost and the run cannot go on (no failover, or nobody left)."""


class Replica(Protocol):
    name: str

    def run(self, indices: list[int]) -> list[bytes]: ...

    def load(self, indices: list[int]) -> None: ...

    def unload(self, indices: list[int]) -> None: ...

    def close(self) -> None: ...


class ReplicaPool:
    """Replicas with their outstanding samples; ``kind`` ("node", "replica") names them in errors."""

    def __init__(self, replicas: Sequence[Replica], failover: bool, kind: str) -> None:
        if not replicas:
            raise ValueError("a pool needs at least one replica")
        self.replicas = list(replicas)
        self.failover = failover
        self.kind = kind
        self.outstanding = {r.name: 0 for r in self.replicas}
        self.served = {r.name: 0 for r in self.replicas}
        self.down: dict[str, str] = {}  # name -> why
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._t0 = time.monotonic()

    def event(self, replica: str, what: str, detail: str, samples: int = 0) -> None:
        with self._lock:
            self.events.append({"t_s": round(time.monotonic() - self._t0, 3), "replica": replica,
                                "event": what, "detail": detail, "samples": samples})

    def _pick(self, n: int) -> Replica | None:
        with self._lock:
            alive = [r for r in self.replicas if r.name not in self.down]
            if not alive:
                return None
            best = min(alive, key=lambda r: (self.outstanding[r.name], self.served[r.name]))
            self.outstanding[best.name] += n
            return best

    def _lost(self, replica: Replica, why: str, samples: int) -> None:
        with self._lock:
            first = replica.name not in self.down
            self.down.setdefault(replica.name, why)
        if first:
            self.event(replica.name, "lost", why, samples)

    def run(self, indices: list[int]) -> list[bytes]:
        """Responses for one batch from the least busy live replica (re-issued on failover)."""
        n = len(indices)
        while True:
            replica = self._pick(n)
            if replica is None:
                raise ReplicaFailed(f"every {self.kind} is lost: " + "; ".join(
                    f"{name}: {why}" for name, why in self.down.items()))
            try:
                payloads = replica.run(indices)
            except ReplicaDown as exc:
                self._lost(replica, str(exc), n)
                if not self.failover:
                    raise ReplicaFailed(f"{self.kind} {replica.name} lost: {exc}") from exc
                self.event(replica.name, "failover", f"{n} samples re-issued to the other "
                           f"{self.kind}s", n)
                continue
            finally:
                with self._lock:
                    self.outstanding[replica.name] -= n
            with self._lock:
                self.served[replica.name] += n
            return payloads

    def _on_each_live(self, call: Callable[[Replica], Any], doing: str,
                      tolerate_loss: bool) -> None:
        """``call`` on every live replica at once; a replica that goes down is marked lost, and
        the loss fails the call (ReplicaFailed, ``doing`` in its message) unless
        ``tolerate_loss`` and another replica is still up."""
        alive = [r for r in self.replicas if r.name not in self.down]
        with ThreadPoolExecutor(max_workers=max(1, len(alive))) as pool:
            futures = [(r, pool.submit(call, r)) for r in alive]
        for replica, future in futures:
            try:
                future.result()
            except ReplicaDown as exc:
                self._lost(replica, str(exc), 0)
                if not tolerate_loss or len(self.down) == len(self.replicas):
                    raise ReplicaFailed(f"{self.kind} {replica.name} lost {doing}: "
                                        f"{exc}") from exc

    def broadcast(self, method: str, indices: list[int]) -> None:
        """Call ``load``/``unload`` on every live replica at once; lost ones are handled as in run."""
        self._on_each_live(lambda r: getattr(r, method)(indices), f"during {method}",
                           tolerate_loss=self.failover)

    def warm_up(self, batches: int, indices: list[int]) -> None:
        """Run ``batches`` untimed batches of ``indices`` on every live replica at once (not
        counted as served); a replica lost on the way fails the warm-up."""

        def run(replica: Replica) -> None:
            for _ in range(batches):
                replica.run(indices)

        self._on_each_live(run, "while warming up", tolerate_loss=False)

    def report(self) -> dict[str, Any]:
        with self._lock:
            return {"kind": self.kind, "failover": self.failover,
                    "replicas": [r.name for r in self.replicas],
                    "samples_served": dict(self.served), "lost": dict(self.down),
                    "failed_over": any(e["event"] == "failover" for e in self.events),
                    "restarts": sum(e["event"] == "restarted" for e in self.events),
                    "events": list(self.events), "notes": self._notes()}

    def _notes(self) -> list[str]:
        """One line per replica that failed over or restarted (shown under the run's verdict)."""
        notes = []
        for name in self.outstanding:
            mine = [e for e in self.events if e["replica"] == name]
            reissued = sum(e["samples"] for e in mine if e["event"] == "failover")
            restarts = sum(e["event"] == "restarted" for e in mine)
            if reissued:
                notes.append(f"failover: {self.kind} {name} was lost at "
                             f"{min(e['t_s'] for e in mine):g} s ({self.down.get(name, '?')}); "
                             f"{reissued} samples were re-issued to the other {self.kind}s, and "
                             "their latencies include the wait")
            if restarts:
                notes.append(f"{self.kind} {name} was restarted {restarts} time(s) by Ray; the "
                             "batches it held were retried, and their latencies include the "
                             "restart")
        return notes

    def close(self) -> None:
        for r in self.replicas:
            try:
                r.close()
            except Exception:  # noqa: BLE001 - closing a lost replica may fail; nothing to do
                pass


class PoolBackend(ABC):
    """The ``SampleBackend`` that remote nodes and Ray actors share: the dataset lives on the
    replicas, so the engine's batches of indices and LoadGen's sample loads go to the pool. A
    subclass's ``open(spec, model)`` calls :meth:`_start` once its replicas are ready."""

    name = "pool"
    concurrency = 2  # batches in flight per replica: one running, one on the wire

    def __init__(self) -> None:
        self.pool: ReplicaPool | None = None
        self._inputs: list[TensorSpec] = []

    def _start(self, pool: ReplicaPool, info: dict[str, Any]) -> None:
        """Serve through ``pool``, whose replicas are ready; ``info`` is what one of them said
        about the model's inputs."""
        self._inputs = [TensorSpec(i["name"], i["dtype"], tuple(i["shape"]))
                        for i in info.get("inputs", [])]
        self.concurrency = 2 * len(pool.replicas)
        self.pool = pool

    @abstractmethod
    def open(self, spec: RunSpec, model: Path | None = None) -> None:
        """Connect to (or start) the replicas ``spec.distribution`` names, running ``model``."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """The replicas and their settings, for run.json."""

    @property
    def sut_name(self) -> str | None:
        """The name LoadGen logs as ``sut_name``; None keeps the ordinary in-process SUT."""
        return None

    @property
    def inputs(self) -> list[TensorSpec]:
        return self._inputs

    def run_indices(self, indices: list[int]) -> list[bytes]:
        assert self.pool is not None
        return self.pool.run(indices)

    def load_samples(self, indices: list[int]) -> None:
        assert self.pool is not None
        self.pool.broadcast("load", list(indices))

    def unload_samples(self, indices: list[int]) -> None:
        assert self.pool is not None
        self.pool.broadcast("unload", list(indices))

    def warm_up(self, batches: int, indices: list[int]) -> None:
        """``batches`` untimed batches of ``indices`` on every replica, before LoadGen starts."""
        assert self.pool is not None
        self.pool.warm_up(batches, list(indices))

    def report(self) -> dict[str, Any]:
        return self.pool.report() if self.pool else {}

    def close(self) -> None:
        if self.pool:
            self.pool.close()
