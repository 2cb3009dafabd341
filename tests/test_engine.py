"""The SUT engine with a real (tiny) task and backend; LoadGen's completion is a recorder."""

from __future__ import annotations

import threading
import time
from typing import Sequence

import numpy as np

from mlharness.sut import Engine, policy_for
from mlharness.sut.batching import split_batches
from mlharness.tasks.base import AccuracyResult, TensorSpec, TensorTask


class CountingTask(TensorTask):
    name = "count"
    loadgen_model = "count"

    def __init__(self, n: int = 100) -> None:
        self.n = n

    @property
    def model_inputs(self) -> list[TensorSpec]:
        return [TensorSpec("x", "int64", (None,))]

    def total_count(self) -> int:
        return self.n

    def performance_count(self) -> int:
        return self.n

    def load_samples(self, indices: Sequence[int]) -> None:
        pass

    def unload_samples(self, indices: Sequence[int]) -> None:
        pass

    def batch_inputs(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
        return {"x": np.asarray(indices, dtype=np.int64)}

    def encode_responses(self, indices, outputs) -> list[bytes]:
        return [int(v).to_bytes(4, "little") for v in outputs["y"]]

    def score(self, entries) -> AccuracyResult:
        return AccuracyResult("n", 0.0, "")

    def sample_length(self, index: int) -> int:
        return index % 7


class DoublingBackend:
    name = "double"

    def __init__(self, fail_at: int | None = None, delay: float = 0.0) -> None:
        self.batches: list[list[int]] = []
        self.fail_at = fail_at
        self.delay = delay
        self.lock = threading.Lock()

    def predict(self, inputs):
        with self.lock:
            self.batches.append(list(inputs["x"]))
            if self.fail_at is not None and len(self.batches) >= self.fail_at:
                raise ValueError("broken batch")
        time.sleep(self.delay)
        return {"y": inputs["x"] * 2}


class Recorder:
    def __init__(self) -> None:
        self.got: dict[int, bytes] = {}
        self.lock = threading.Lock()
        self.threads: set[str] = set()

    def __call__(self, ids, payloads) -> None:
        with self.lock:
            self.threads.add(threading.current_thread().name)
            for i, p in zip(ids, payloads):
                assert i not in self.got, "answered twice"
                self.got[i] = p

    def wait(self, n: int, timeout: float = 5.0) -> None:
        end = time.monotonic() + timeout
        while len(self.got) < n and time.monotonic() < end:
            time.sleep(0.005)


def test_policies_per_scenario() -> None:
    assert policy_for("SingleStream").inline and policy_for("SingleStream").max_batch == 1
    assert policy_for("MultiStream", samples_per_query=8).max_batch == 8
    assert policy_for("Offline").max_batch == 32 and not policy_for("Offline").inline
    assert policy_for("Offline", 4).max_batch == 4
    assert policy_for("Offline", sort_by_length=True).sort_by_length
    assert not policy_for("Server", sort_by_length=True).sort_by_length
    assert split_batches([(i, i) for i in range(5)], 2) == [[(0, 0), (1, 1)], [(2, 2), (3, 3)],
                                                            [(4, 4)]]


def test_offline_batches_and_answers_every_sample_from_workers() -> None:
    backend, rec = DoublingBackend(), Recorder()
    engine = Engine(CountingTask(), backend, policy_for("Offline", 16), rec, workers=2)
    engine.start()
    engine.issue(list(range(1000, 1100)), list(range(100)))
    rec.wait(100)
    engine.stop()
    assert len(rec.got) == 100
    assert all(int.from_bytes(rec.got[1000 + i], "little") == 2 * i for i in range(100))
    assert max(len(b) for b in backend.batches) == 16
    assert sum(len(b) for b in backend.batches) == 100
    assert rec.threads <= {"mlharness-worker-0", "mlharness-worker-1"}


def test_offline_length_sort_groups_similar_lengths() -> None:
    backend, rec = DoublingBackend(), Recorder()
    engine = Engine(CountingTask(), backend, policy_for("Offline", 10, sort_by_length=True), rec)
    engine.start()
    engine.issue(list(range(70)), list(range(70)))
    rec.wait(70)
    engine.stop()
    lengths = [i % 7 for b in backend.batches for i in b]
    assert lengths == sorted(lengths, reverse=True)
    assert all(len({i % 7 for i in b}) == 1 for b in backend.batches)


def test_single_stream_runs_inline_on_the_issuing_thread() -> None:
    backend, rec = DoublingBackend(), Recorder()
    engine = Engine(CountingTask(), backend, policy_for("SingleStream"), rec)
    engine.start()
    engine.issue([5], [3])
    engine.stop()
    assert rec.got == {5: (6).to_bytes(4, "little")}
    assert rec.threads == {threading.current_thread().name}


def test_server_batches_what_is_queued() -> None:
    backend, rec = DoublingBackend(delay=0.05), Recorder()
    engine = Engine(CountingTask(), backend, policy_for("Server", 4), rec)
    engine.start()
    for i in range(9):  # arrive while the worker is busy: later batches coalesce
        engine.issue([i], [i])
    rec.wait(9)
    engine.stop()
    assert len(rec.got) == 9
    assert len(backend.batches) < 9 and max(len(b) for b in backend.batches) <= 4


def test_stop_finishes_what_was_queued_before_it_on_any_number_of_workers() -> None:
    """A query cut into batches goes back to the queue behind the stop signals; every worker
    count still answers every sample once and ends its threads."""
    for workers in (1, 2, 3):
        backend, rec = DoublingBackend(), Recorder()
        engine = Engine(CountingTask(), backend, policy_for("Offline", 7), rec, workers=workers)
        engine.start()
        engine.issue(list(range(100)), list(range(100)))
        engine.issue([100, 101], [1, 2])
        engine.stop()
        assert sorted(rec.got) == list(range(102)), workers
        assert max(len(b) for b in backend.batches) == 7
        assert not any(t.is_alive() for t in engine._threads)


def test_failure_answers_everything_and_reports_once() -> None:
    backend, rec = DoublingBackend(fail_at=2, delay=0.01), Recorder()
    failures: list[str] = []
    engine = Engine(CountingTask(), backend, policy_for("Offline", 5), rec,
                    on_failure=failures.append)
    engine.start()
    engine.issue(list(range(50)), list(range(50)))
    rec.wait(50)
    engine.issue([99], [1])  # after the failure: answered at once, empty
    rec.wait(51)
    engine.stop()
    assert len(rec.got) == 51
    assert rec.got[99] == b""
    assert len(failures) == 1 and "ValueError: broken batch" in failures[0]
    assert engine.failure == failures[0]


def test_completed_count_is_exact_with_many_workers() -> None:
    """``Engine.completed`` is added to by every worker thread under a lock: no lost updates."""
    backend, rec = DoublingBackend(), Recorder()
    n = 4000
    engine = Engine(CountingTask(n), backend, policy_for("Server", 1), rec, workers=8)
    engine.start()
    for i in range(0, n, 10):
        engine.issue(list(range(i, i + 10)), list(range(i, i + 10)))
    rec.wait(n, timeout=30)
    engine.stop()
    assert len(rec.got) == n and engine.completed == n and engine.batches == len(backend.batches)


def test_warm_up_runs_untimed_batches_on_every_worker_and_answers_nothing() -> None:
    backend, rec = DoublingBackend(), Recorder()
    engine = Engine(CountingTask(), backend, policy_for("Offline", 4), rec, workers=3)
    took = engine.warm_up(2, index=5)
    assert took >= 0.0
    # 2 batches x 3 workers, each the full batch size of the loaded sample
    assert backend.batches == [[5, 5, 5, 5]] * 6
    assert rec.got == {} and engine.completed == 0 and engine.batches == 0


class ShapedTask(CountingTask):
    """A task whose inputs come in three shapes (as BERT's batch widths)."""

    def warmup_batches(self, batch: list[int]) -> list[list[int]]:
        return [[i] * len(batch) for i in (30, 20, 10)]


def test_warm_up_runs_each_shape_the_task_names_on_every_worker() -> None:
    backend = DoublingBackend()
    engine = Engine(ShapedTask(), backend, policy_for("Offline", 2), Recorder(), workers=2)
    heard = []  # each batch is progress for the run's stall clock
    engine.warm_up(2, on_batch=lambda: heard.append(1))
    # 3 shapes x 2 batches x 2 workers, every batch the full batch size
    assert sorted(map(tuple, backend.batches)) == sorted([(i, i) for i in (30, 20, 10)] * 4)
    assert len(heard) == 12
    assert engine.completed == 0 and engine.batches == 0 and engine.warmup_shapes == 3


def test_warm_up_of_an_inline_policy_is_one_sample_and_zero_means_none() -> None:
    backend = DoublingBackend()
    engine = Engine(CountingTask(), backend, policy_for("SingleStream"), Recorder())
    engine.warm_up(1)
    assert backend.batches == [[0]]
    assert engine.warm_up(0) == 0.0 and len(backend.batches) == 1


def test_warm_up_raises_the_backends_failure() -> None:
    engine = Engine(CountingTask(), DoublingBackend(fail_at=1), policy_for("Offline", 2),
                    Recorder(), workers=2)
    try:
        engine.warm_up(1)
    except ValueError as exc:
        assert "broken batch" in str(exc)
    else:
        raise AssertionError("the warm-up hid the backend's failure")
    assert engine.failure is None  # nothing was issued: the run's failure is reported by the caller


class IndexReplica:
    """An in-process replica of a pool backend: records the batches of indices it ran."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.batches: list[list[int]] = []
        self.loaded: set[int] = set()

    def run(self, indices: list[int]) -> list[bytes]:
        assert set(indices) <= self.loaded, "a warm-up sample was not loaded first"
        self.batches.append(list(indices))
        return [b""] * len(indices)

    def load(self, indices: list[int]) -> None:
        self.loaded.update(indices)

    def unload(self, indices: list[int]) -> None:
        self.loaded.difference_update(indices)

    def close(self) -> None: ...


def test_warm_up_through_replicas_runs_each_shape_on_each_and_unloads_its_samples() -> None:
    from mlharness.distributed.pool import PoolBackend, ReplicaPool
    from mlharness.runner.worker import warm_up
    from mlharness.sut.samples import sample_home

    class IndexPool(PoolBackend):  # as the remote and ray backends, without their replicas
        def open(self, spec: object, model: object = None) -> None: ...

        def describe(self) -> dict:
            return {"name": "index-pool"}

    replicas = [IndexReplica("a"), IndexReplica("b")]
    backend = IndexPool()
    backend._start(ReplicaPool(replicas, failover=False, kind="node"), {})
    engine = Engine(ShapedTask(), backend, policy_for("Offline", 2), Recorder(), workers=4)
    phases: list[str] = []
    home = sample_home(ShapedTask(), backend)
    assert not home.local and home.sut_name is None
    took = warm_up(home, engine, 2, phases.append)
    assert took >= 0.0 and engine.warmup_shapes == 3
    for r in replicas:  # each shape twice on every replica, then nothing left loaded
        assert r.batches == [[i, i] for i in (30, 20, 10) for _ in range(2)]
        assert r.loaded == set()
    assert backend.pool is not None and backend.pool.served == {"a": 0, "b": 0}
    assert phases[-1] == "warming up the backend"


class TwoCallTask(CountingTask):
    """A sample of two backend calls (as 3D-UNet's windows): its own seam."""

    def infer(self, predict, indices: Sequence[int]) -> list[bytes]:
        predict(self.batch_inputs(indices))
        return self.encode_responses(indices, predict(self.batch_inputs(indices)))


def test_the_backend_calls_of_a_task_of_many_calls_are_counted_for_the_stall_clock() -> None:
    backend, rec = DoublingBackend(), Recorder()
    engine = Engine(TwoCallTask(), backend, policy_for("Offline", 4), rec, workers=1)
    engine.start()
    engine.issue(list(range(1000, 1010)), list(range(10)))
    rec.wait(10)
    engine.stop()
    assert len(rec.got) == 10 and engine.calls == len(backend.batches) == 6  # 3 batches x 2
    plain = Engine(CountingTask(), DoublingBackend(), policy_for("Offline", 4), Recorder())
    plain.start()
    plain.issue([1], [0])
    plain.stop()
    assert plain.calls == 0  # one call a batch: completions are its progress, nothing wrapped


def test_an_inline_backend_runs_every_scenario_on_the_issuing_thread_in_batches() -> None:
    """``BackendBase.inline`` (the no-op): no worker thread; an Offline query is cut into
    batches of max_batch (length-sorted when asked) and a Server query completes at once."""
    assert policy_for("Server", inline=True).inline and policy_for("Offline", inline=True).inline
    backend, rec = DoublingBackend(), Recorder()
    engine = Engine(CountingTask(), backend, policy_for("Offline", 16, sort_by_length=True,
                                                        inline=True), rec, workers=4)
    engine.start()
    assert engine.n_workers == 0 and not engine._threads
    engine.issue(list(range(1000, 1100)), list(range(100)))
    assert len(rec.got) == 100  # before issue returned
    assert all(int.from_bytes(rec.got[1000 + i], "little") == 2 * i for i in range(100))
    assert [len(b) for b in backend.batches] == [16] * 6 + [4]
    lengths = [i % 7 for b in backend.batches for i in b]
    assert lengths == sorted(lengths, reverse=True)
    server = Engine(CountingTask(), backend, policy_for("Server", 8, inline=True), rec)
    server.issue([7], [3])
    engine.stop()
    assert rec.got[7] == (6).to_bytes(4, "little")
    assert rec.threads == {threading.current_thread().name}
    assert (engine.completed, engine.batches, server.completed) == (100, 7, 1)
