"""Batching policies per scenario.

SingleStream runs each sample inline on LoadGen's issue thread (one sample in flight, no hand-off
cost, like the reference's RunnerBase). The other scenarios queue samples for long-lived workers;
a worker takes what is queued up to ``max_batch`` — one big query is cut into large batches
(Offline), a MultiStream query becomes one batch, and Server batches whatever has piled up. A
backend whose ``predict`` costs less than the hand-off (``BackendBase.inline``: the no-op) runs
inline in every scenario, each query cut into batches of ``max_batch`` on LoadGen's thread.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the default largest batch of the queued scenarios (MultiStream: a query, SingleStream: 1)
DEFAULT_MAX_BATCH = {"Server": 8, "Offline": 32}


@dataclass(frozen=True)
class BatchPolicy:
    max_batch: int
    inline: bool = False  # run on the issuing thread instead of a worker
    sort_by_length: bool = False  # order a query's samples by Task.sample_length before batching

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError("max_batch must be >= 1")


def policy_for(scenario: str, max_batch: int | None = None, sort_by_length: bool = False,
               samples_per_query: int = 8, inline: bool = False) -> BatchPolicy:
    """The default policy for a scenario, with an optional user batch size; ``inline``: the
    backend runs on LoadGen's issue thread in every scenario (``BackendBase.inline``)."""
    if scenario == "SingleStream":
        return BatchPolicy(max_batch=1, inline=True)
    default = samples_per_query if scenario == "MultiStream" else DEFAULT_MAX_BATCH[scenario]
    return BatchPolicy(
        max_batch=max_batch or default,
        inline=inline,
        sort_by_length=sort_by_length and scenario == "Offline",
    )


def split_batches(items: list[tuple[int, int]], max_batch: int) -> list[list[tuple[int, int]]]:
    """Cut ``(response id, sample index)`` pairs into consecutive batches of at most max_batch."""
    return [items[i:i + max_batch] for i in range(0, len(items), max_batch)]
