"""The engine: long-lived workers that batch samples, run the backend and deliver completions.

Completions are handed to ``complete(ids, payloads)`` — supplied by the LoadGen adapter — always
from a long-lived thread (a worker, or LoadGen's own issue thread for inline policies). When the
backend raises, the engine records the failure, answers every outstanding and future sample with
an empty response so LoadGen never waits forever, and calls ``on_failure`` once.
"""

from __future__ import annotations

import threading
import traceback
from collections import deque
from typing import Callable, Sequence

from mlharness.backends.base import Backend
from mlharness.sut.batching import BatchPolicy
from mlharness.tasks.base import Task

Complete = Callable[[Sequence[int], Sequence[bytes]], None]


class Engine:
    def __init__(
        self,
        task: Task,
        backend: Backend,
        policy: BatchPolicy,
        complete: Complete,
        workers: int = 1,
        on_failure: Callable[[str], None] | None = None,
    ) -> None:
        self.task = task
        self.backend = backend
        self.policy = policy
        self._complete = complete
        self._on_failure = on_failure
        self._queue: deque[tuple[int, int]] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self.n_workers = 0 if policy.inline else max(1, workers)
        self.failure: str | None = None
        self.completed = 0  # samples answered (including failed ones)
        self.batches = 0

    # ---- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        for n in range(self.n_workers):
            t = threading.Thread(target=self._worker, name=f"mlharness-worker-{n}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=10)

    # ---- LoadGen side ----------------------------------------------------------------------
    def issue(self, ids: Sequence[int], indices: Sequence[int]) -> None:
        """Accept a query's samples (called on LoadGen's issue thread)."""
        items = list(zip(ids, indices))
        if self.policy.inline:
            self._run_batch(items)
            return
        if self.policy.sort_by_length and len(items) > 1:
            items.sort(key=lambda item: self.task.sample_length(item[1]), reverse=True)
        with self._cond:
            self._queue.extend(items)
            self._cond.notify(len(items) if len(items) < self.n_workers else self.n_workers)

    def flush(self) -> None:
        """LoadGen's flush callback: nothing is held back, so nothing to do."""

    # ---- work ------------------------------------------------------------------------------
    def _worker(self) -> None:
        max_batch = self.policy.max_batch
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if self._stopping and not self._queue:
                    return
                take = min(max_batch, len(self._queue))
                items = [self._queue.popleft() for _ in range(take)]
            self._run_batch(items)

    def _run_batch(self, items: list[tuple[int, int]]) -> None:
        ids = [i for i, _ in items]
        if self.failure is not None:
            self._answer_empty(ids)
            return
        indices = [x for _, x in items]
        try:
            outputs = self.backend.predict(self.task.batch_inputs(indices))
            payloads = self.task.encode_responses(indices, outputs)
            if len(payloads) != len(ids):
                raise RuntimeError(
                    f"task encoded {len(payloads)} responses for a batch of {len(ids)} samples"
                )
        except BaseException as exc:  # noqa: BLE001 - any failure must reach LoadGen and the user
            self._fail(exc)
            self._answer_empty(ids)
            return
        self._complete(ids, payloads)
        self.completed += len(ids)
        self.batches += 1

    def _answer_empty(self, ids: list[int]) -> None:
        self._complete(ids, [b""] * len(ids))
        self.completed += len(ids)

    def _fail(self, exc: BaseException) -> None:
        with self._cond:
            if self.failure is not None:
                return
            last = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
            where = f" (at {last[0].filename}:{last[0].lineno})" if last else ""
            self.failure = f"{type(exc).__name__}: {exc}{where}"
            self.failure_traceback = "".join(traceback.format_exception(exc))
            pending = list(self._queue)
            self._queue.clear()
        if pending:
            self._answer_empty([i for i, _ in pending])
        if self._on_failure:
            self._on_failure(self.failure)
