"""Python's cyclic garbage collector held back while a test is timed.

A full (generation 2) collection walks every container object the process holds: the imports,
a model's modules, a dataset's lists, a tokenizer. In an LLM client that has imported
transformers, one such pass takes about 120 ms (12 ms without it) and stops the event loop
that long, late for every first token due in it: a TTFT p99 of +146 to +192 ms at 800 QPS
against +4 with the pass made cheap (issue 50, ``benchmarks/llm_client.py --sweep-points
800q``). The objects of a request's path are freed by their reference counts; the collector
finds nothing there.

So, while a test runs: what is alive when it starts (and after each load of samples) is frozen
(``gc.freeze``: left out of every pass), and the thresholds are raised as MLCommons' endpoints
client raises them in its worker (``endpoint_client/worker.py``, ``(70000, 10, 100)``), so a
pass is rare and walks only what the test itself created. Both are undone when the test ends.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

#: generation 0 every 70,000 net allocations, 1 every 10 of those, 2 every 100 of those
HELD_THRESHOLDS = (70_000, 10, 100)

T = TypeVar("T")


@contextmanager
def held_collector() -> Iterator[None]:
    """Collect once, freeze what is alive and raise the thresholds; restore them after."""
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*HELD_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def frozen_after(load: Callable[[T], None]) -> Callable[[T], None]:
    """``load`` that then freezes what it loaded (samples loaded inside a test live through it)."""

    def load_then_freeze(indices: T) -> None:
        load(indices)
        gc.freeze()

    return load_then_freeze
