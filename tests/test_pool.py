"""The replica pool that the remote and Ray backends share, on in-process replicas: the warm-up
reaches every live replica and is not counted as served; a replica lost while warming up fails
the warm-up, named."""

from __future__ import annotations

import pytest

from mlharness.backends.pool import ReplicaDown, ReplicaFailed, ReplicaPool


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
