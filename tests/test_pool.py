"""The replica pool that the remote and Ray backends share, on in-process replicas: batches
sent one at a time take turns; the warm-up reaches every live replica and is not counted as served; a replica lost while warming up fails
the warm-up, named."""

from __future__ import annotations

import pytest

from mlharness.distributed.pool import ReplicaDown, ReplicaFailed, ReplicaPool


class Replica:
    def __init__(self, name: str, down: bool = False) -> None:
        self.name = name
        self.down = down
        self.batches: list[list[int]] = []

    def run(self, indices: list[int]) -> list[bytes]:
        if self.down:
            raise ReplicaDown("connection refused")
        self.batches.append(list(indices))
        return [b"\x00"] * len(indices)

    def load(self, indices: list[int]) -> None: ...

    def unload(self, indices: list[int]) -> None: ...

    def close(self) -> None: ...


def test_warm_up_runs_on_every_live_replica_and_is_not_served() -> None:
    replicas = [Replica("a"), Replica("b"), Replica("c")]
    pool = ReplicaPool(replicas, failover=True, kind="node")
    pool.down["c"] = "lost earlier"
    pool.warm_up(2, [0, 0, 0])
    assert replicas[0].batches == replicas[1].batches == [[0, 0, 0], [0, 0, 0]]
    assert replicas[2].batches == []
    assert pool.served == {"a": 0, "b": 0, "c": 0}
    assert pool.outstanding == {"a": 0, "b": 0, "c": 0}


@pytest.mark.parametrize("failover", [False, True])
def test_replica_lost_while_warming_up_fails_the_warm_up(failover: bool) -> None:
    replicas = [Replica("a"), Replica("b", down=True)]
    pool = ReplicaPool(replicas, failover=failover, kind="node")
    with pytest.raises(ReplicaFailed, match="node b lost while warming up: connection refused"):
        pool.warm_up(1, [0])
    assert pool.down == {"b": "connection refused"}
    assert [e["event"] for e in pool.events] == ["lost"]


def test_batches_sent_one_at_a_time_take_turns() -> None:
    # nothing is outstanding when a batch is picked, so the tie goes to the least served: a
    # single busy worker (as on a loaded machine) still spreads its batches over the replicas
    replicas = [Replica("a"), Replica("b"), Replica("c")]
    pool = ReplicaPool(replicas, failover=False, kind="node")
    for first in range(0, 12, 2):
        pool.run([first, first + 1])
    assert [len(r.batches) for r in replicas] == [2, 2, 2]
    assert pool.served == {"a": 4, "b": 4, "c": 4}
    pool.run(list(range(5)))  # a big batch to "a": it is served last from now on
    pool.run([0])
    pool.run([1])
    assert [len(r.batches) for r in replicas] == [3, 3, 3]
    assert pool.served == {"a": 9, "b": 5, "c": 5}
