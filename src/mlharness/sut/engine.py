"""The engine: long-lived workers that batch samples, run the backend and deliver completions.

Completions are handed to ``complete(ids, payloads)`` — supplied by the LoadGen adapter — always
from a long-lived thread (a worker, or LoadGen's own issue thread for inline policies). When the
backend raises, the engine records the failure, answers every outstanding and future sample with
an empty response so LoadGen never waits forever, and calls ``on_failure`` once.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from typing import Callable, Sequence, cast

import numpy as np

from mlharness.backends.base import Backend, SampleBackend
from mlharness.sut.batching import BatchPolicy
from mlharness.sut.placement import pin_current_thread
from mlharness.tasks.base import Predict, Task, TensorTask

Complete = Callable[[Sequence[int], Sequence[bytes]], None]


class _Pending:
    """The unanswered rest of one issued query."""

    __slots__ = ("ids", "indices", "start")

    def __init__(self, ids: Sequence[int], indices: Sequence[int]) -> None:
        self.ids = ids if type(ids) is list else list(ids)
        self.indices = indices if type(indices) is list else list(indices)
        self.start = 0

    def take(self, n: int) -> tuple[list[int], list[int]]:
        """The next ``n`` samples (new lists: the caller may extend them)."""
        a, b = self.start, self.start + n
        self.start = min(b, len(self.ids))
        return self.ids[a:b], self.indices[a:b]

    @property
    def empty(self) -> bool:
        return self.start >= len(self.ids)


class Engine:
    def __init__(
        self,
        task: TensorTask,
        backend: Backend | SampleBackend,
        policy: BatchPolicy,
        complete: Complete,
        workers: int = 1,
        on_failure: Callable[[str], None] | None = None,
        instances: Sequence[Backend] = (),
        cpus: Sequence[Sequence[int]] = (),
    ) -> None:
        """``backend``: a runtime, or the serve nodes / Ray replicas that hold the samples
        themselves (they take indices, not tensors). ``instances`` (several loaded runtimes) and
        ``cpus`` (a core block per instance): worker ``n`` runs on instance
        ``n % len(instances)``, pinned to that instance's block."""
        self.task = task
        #: the replicas that hold the samples, or None: the runtimes in ``instances`` run them
        self._holder = backend if isinstance(backend, SampleBackend) else None
        self.instances: list[Backend] = (
            [] if self._holder is not None
            else list(instances) or [cast(Backend, backend)])
        #: what an inline query (SingleStream, or an inline backend: on LoadGen's thread) calls
        self._first: Predict | None = None
        self.cpus = [list(c) for c in cpus]
        self.policy = policy
        self._inline, self._step = policy.inline, policy.max_batch
        self._complete = complete
        self._on_failure = on_failure
        # queries wait in a C-level queue: handing one to a sleeping worker costs half the CPU
        # of a Condition's wait/notify in Python (benchmarks/overhead.py, Server)
        self._inbox: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._sort = policy.sort_by_length and type(task).sample_length is not Task.sample_length
        self._fail_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.n_workers = 0 if policy.inline else max(1, workers, len(self.instances))
        self.failure: str | None = None
        self.failure_traceback = ""
        self.completed = 0  # samples answered (including failed ones); under _count_lock
        #: backend calls of a task whose sample is many calls (its own ``infer``: 3D-UNet's
        #: windows): progress for the run's stall clock while one sample takes minutes
        self.calls = 0
        self._counts_calls = isinstance(task, TensorTask) and type(task).infer is not \
            TensorTask.infer
        self.batches = 0
        if self.instances:
            self._first = self._predict(self.instances[0])
        self.warmup_shapes = 0  # the input shapes the warm-up ran (Task.warmup_batches)
        self._count_lock = threading.Lock()  # worker threads add, progress/stall watch reads

    # ---- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        for n in range(self.n_workers):
            t = threading.Thread(target=self._worker, args=(n,), name=f"mlharness-worker-{n}",
                                 daemon=True)
            t.start()
            self._threads.append(t)

    def warmup_plan(self, index: int = 0) -> list[list[int]]:
        """The warm-up's batches of sample indices, from the loaded sample ``index``: one per
        input shape the task names (``Task.warmup_batches``: BERT's batch widths)."""
        batch = [index] * (1 if self.policy.inline else self.policy.max_batch)
        return self.task.warmup_batches(batch)

    def warm_up(self, batches: int, index: int = 0,
                on_batch: Callable[[], None] | None = None) -> float:
        """Run ``batches`` untimed batches of each of :meth:`warmup_plan`'s batches on every
        worker's backend at once, before LoadGen starts, and return the seconds it took (the
        samples they name must be loaded). ``on_batch`` hears each batch done (progress for
        the stall clock: a slow model's warm-up of many shapes outlasts it).

        First calls pay one-time costs (kernel JIT, memory pools, per-stream setup, kernels built
        per input shape) that a short timed run would otherwise count; the official vision
        harness warms up the same way (``vision/classification_and_detection/python/main.py``).
        Backends that hold the samples themselves (remote nodes, Ray replicas) run the batches
        on each of their replicas."""
        if batches < 1:
            return 0.0
        t0 = time.monotonic()
        plan = self.warmup_plan(index)
        self.warmup_shapes = len(plan)
        if self._holder is not None:
            for batch in plan:
                self._holder.warm_up(batches, batch)
                if on_batch is not None:
                    on_batch()
            return time.monotonic() - t0
        errors: list[BaseException] = []

        def run(n: int) -> None:  # as worker n runs: its instance, its pinned cores
            try:
                self._pin(n)
                predict = self.instances[n % len(self.instances)].predict
                for batch in plan:
                    for _ in range(batches):
                        self.task.infer(predict, batch)
                        if on_batch is not None:
                            on_batch()
            except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(n,), daemon=True)
                   for n in range(max(1, self.n_workers))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return time.monotonic() - t0

    def stop(self) -> None:
        """Let the workers finish what is queued, then end them."""
        for _ in self._threads:
            self._inbox.put(None)  # one each, behind the queued work
        for t in self._threads:
            t.join(timeout=10)

    # ---- LoadGen side ----------------------------------------------------------------------
    def issue(self, ids: Sequence[int], indices: Sequence[int]) -> None:
        """Accept a query's samples (called on LoadGen's issue thread)."""
        if self._inline and len(ids) <= self._step:  # SingleStream, an inline Server query
            self._run_batch(ids, indices, self._first)
            return
        if self._sort and len(ids) > 1:
            length = self.task.sample_length
            order = sorted(range(len(ids)), key=lambda k: length(indices[k]), reverse=True)
            ids = [ids[k] for k in order]
            indices = [indices[k] for k in order]
        if self._inline:  # on this thread: a query cut into batches of max_batch
            step = self._step
            for k in range(0, len(ids), step):
                self._run_batch(ids[k:k + step], indices[k:k + step], self._first)
            return
        # one entry per query; a worker cuts a batch off its front and queues the rest again
        # for the next worker, so a huge Offline query starts running at once on every worker
        self._inbox.put(_Pending(ids, indices))

    def flush(self) -> None:
        """LoadGen's flush callback: nothing is held back, so nothing to do."""

    # ---- work ------------------------------------------------------------------------------
    def _take(self, head: _Pending) -> tuple[list[int], list[int]]:
        """A batch of up to max_batch samples: from ``head``, then from whatever else is queued
        (Server batches what has piled up). A query cut short goes back to the queue."""
        inbox = self._inbox
        ids, indices = head.take(self.policy.max_batch)
        room = self.policy.max_batch - len(ids)
        while room and head.empty and not inbox.empty():
            try:
                after = inbox.get_nowait()
            except queue.Empty:  # another worker took it
                break
            if after is None:  # stopping: leave the signal for a worker
                inbox.put(None)
                break
            head = after
            part_ids, part_indices = head.take(room)
            ids += part_ids
            indices += part_indices
            room -= len(part_ids)
        if not head.empty:
            inbox.put(head)
        return ids, indices

    def _worker(self, n: int = 0) -> None:
        predict = (self._predict(self.instances[n % len(self.instances)]) if self.instances
                   else None)
        self._pin(n)
        inbox = self._inbox
        draining = False  # after its stop signal: what was queued behind it, then end
        while True:
            if not draining:
                head = inbox.get()
            else:
                try:
                    head = inbox.get_nowait()
                except queue.Empty:
                    return
            if head is None:
                if draining:  # another worker's signal: that worker drains what follows it
                    inbox.put(None)
                    return
                draining = True
                continue
            ids, indices = self._take(head)
            self._run_batch(ids, indices, predict)

    def _pin(self, n: int) -> None:
        """Pin the calling thread to worker ``n``'s block of cores (if instances are placed)."""
        if self.cpus:
            pin_current_thread(self.cpus[n % len(self.cpus)])

    def _run_batch(self, ids: Sequence[int], indices: Sequence[int],
                   predict: Predict | None) -> None:
        """Run one batch through ``predict`` (a backend's, from :meth:`_predict`; None: on the
        replicas that hold the samples) and complete its queries."""
        if self.failure is not None:
            self._answer_empty(ids)
            return
        try:
            if predict is None:
                payloads = cast(SampleBackend, self._holder).run_indices(list(indices))
            else:
                payloads = self.task.infer(predict, indices)
            if len(payloads) != len(ids):
                raise RuntimeError(
                    f"task encoded {len(payloads)} responses for a batch of {len(ids)} samples"
                )
        except BaseException as exc:  # noqa: BLE001 - any failure must reach LoadGen and the user
            self._fail(exc)
            self._answer_empty(ids)
            return
        self._complete(ids, payloads)
        if self.n_workers:
            with self._count_lock:
                self.completed += len(ids)
                self.batches += 1
        else:  # inline: LoadGen's issue thread is the one writer (the lock cost 0.2 us)
            self.completed += len(ids)
            self.batches += 1

    def _predict(self, backend: Backend) -> Predict:
        """``backend.predict``, counted in :attr:`calls` for a task of many calls a sample."""
        predict = backend.predict
        if not self._counts_calls:
            return predict

        def counted(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            out = predict(inputs)
            self.calls += 1  # a progress count: an increment lost to a race does not matter
            return out

        return counted

    def _answer_empty(self, ids: Sequence[int]) -> None:
        self._complete(ids, [b""] * len(ids))
        with self._count_lock:
            self.completed += len(ids)

    def _fail(self, exc: BaseException) -> None:
        with self._fail_lock:
            if self.failure is not None:
                return
            last = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
            where = f" (at {last[0].filename}:{last[0].lineno})" if last else ""
            self.failure = f"{type(exc).__name__}: {exc}{where}"
            self.failure_traceback = "".join(traceback.format_exception(exc))
        pending: list[int] = []
        stops = 0
        while True:  # what is queued now is answered here; what comes later, by _run_batch
            try:
                head = self._inbox.get_nowait()
            except queue.Empty:
                break
            if head is None:
                stops += 1
            else:
                pending += head.ids[head.start:]
        for _ in range(stops):
            self._inbox.put(None)
        if pending:
            self._answer_empty(pending)
        if self._on_failure:
            self._on_failure(self.failure)
