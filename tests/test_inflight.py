"""The shapes in flight that a worker's death by signal names (runner/inflight.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from mlharness.runner.inflight import INFLIGHT_FILE, InFlight, describe_in_flight, shapes_text


class Held:
    """A backend whose predict waits until released, so a batch stays in flight."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def predict(self, inputs: dict) -> dict:
        self.entered.set()
        self.release.wait(10)
        return {"out": np.zeros(1)}


def bert_batch(n: int, length: int) -> dict[str, np.ndarray]:
    return {k: np.zeros((n, length), np.int64) for k in ("input_ids", "input_mask", "segment_ids")}


def test_shapes_grouped_by_shape() -> None:
    assert shapes_text(bert_batch(4, 384)) == "input_ids, input_mask, segment_ids [4, 384]"
    assert shapes_text({"image": np.zeros((2, 3, 8, 8)), "k": np.zeros(2)}) == \
        "image [2, 3, 8, 8]; k [2]"


def test_busy_threads_are_named_idle_ones_are_not(tmp_path: Path) -> None:
    backend = Held()
    InFlight(tmp_path).wrap(backend)
    backend.release.set()
    backend.predict(bert_batch(4, 96))  # done: no longer in flight
    backend.release.clear()
    backend.entered.clear()
    t = threading.Thread(target=backend.predict, args=(bert_batch(2, 320),))
    t.start()
    assert backend.entered.wait(10)
    # read while the batch runs, as the parent does after the worker died in it
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / INFLIGHT_FILE).write_bytes((tmp_path / INFLIGHT_FILE).read_bytes())
    backend.release.set()
    t.join()
    assert describe_in_flight(copy) == "input_ids, input_mask, segment_ids [2, 320] in flight"
    assert describe_in_flight(tmp_path) is None  # both batches done
    assert not (tmp_path / INFLIGHT_FILE).exists()
