"""What the backend was running when the run's worker died: each engine thread's batch shapes.

The child maps a small file in the run directory (``INFLIGHT_FILE``) and, around every
``predict``, marks its thread's slot busy or idle (one byte) and writes the batch's input shapes
when they change; the stores go to the page cache, so the file holds them even after a death by
signal, and the parent reads it into the one-line reason (``describe_in_flight``). A slot is
``SLOT`` bytes: a flag (``BUSY`` or ``IDLE``) then the shapes as text, NUL-padded.
"""

from __future__ import annotations

import mmap
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.backends.base import Backend

INFLIGHT_FILE = "worker_inflight.bin"
SLOT = 256
SLOTS = 64  # engine and warm-up threads (a slot each)
BUSY, IDLE = ord(">"), ord(" ")


def _shape(value: Any) -> tuple[int, ...]:
    """An array's shape; ``np.shape`` (slower) for anything else."""
    try:
        return value.shape
    except AttributeError:
        return np.shape(value)


def shapes_text(inputs: dict[str, Any]) -> str:
    """``input_ids, input_mask, segment_ids [4, 384]``: the inputs grouped by shape."""
    groups: dict[tuple[int, ...], list[str]] = {}
    for name, value in inputs.items():
        groups.setdefault(tuple(np.shape(value)), []).append(name)
    return "; ".join(f"{', '.join(names)} {list(shape)}" for shape, names in groups.items())


class InFlight:
    """The child's side: wraps each backend's ``predict`` to keep its thread's slot current."""

    def __init__(self, run_dir: Path) -> None:
        path = Path(run_dir) / INFLIGHT_FILE
        with open(path, "wb") as f:
            f.write(b"\0" * SLOT * SLOTS)
        fd = os.open(path, os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, SLOT * SLOTS)
        finally:
            os.close(fd)
        self._claimed = 0  # slots handed out, under _lock
        self._lock = threading.Lock()
        self._mine = threading.local()  # this thread's slot offset and last shapes

    def wrap(self, backend: Backend) -> None:
        """Replace ``backend.predict`` (an instance attribute) with one that records itself."""
        predict = backend.predict

        def recorded(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            offset = self._enter(inputs)
            try:
                return predict(inputs)
            finally:
                if offset is not None:
                    self._map[offset] = IDLE

        try:
            backend.predict = recorded  # type: ignore[method-assign]  # on purpose, this instance only
        except AttributeError:  # a backend with __slots__: its deaths name no shapes
            pass

    def _enter(self, inputs: dict[str, Any]) -> int | None:
        mine = self._mine
        try:
            offset = mine.offset
        except AttributeError:  # this thread's first batch: claim a slot
            with self._lock:
                offset = self._claimed * SLOT if self._claimed < SLOTS else None
                self._claimed += 1
            mine.offset, mine.key = offset, None
        if offset is None:
            return None
        key = tuple([(name, _shape(value)) for name, value in inputs.items()])
        if mine.key != key:  # a new shape: its text (a batch of the same, no write)
            mine.key = key
            text = shapes_text(inputs).encode()[:SLOT - 2]
            self._map[offset + 1:offset + SLOT] = text + b"\0" * (SLOT - 1 - len(text))
        self._map[offset] = BUSY
        return offset


def describe_in_flight(run_dir: Path) -> str | None:
    """``input_ids, ... [4, 384] in flight`` (one per busy engine thread, joined by ``and``), or
    None when no batch was; removes the file."""
    path = Path(run_dir) / INFLIGHT_FILE
    try:
        data = path.read_bytes()
        path.unlink()
    except OSError:
        return None
    busy = [data[k + 1:k + SLOT].split(b"\0", 1)[0].decode(errors="replace")
            for k in range(0, len(data) - SLOT + 1, SLOT) if data[k] == BUSY]
    return " and ".join(busy) + " in flight" if busy else None


def discard(run_dir: Path) -> None:
    """Remove the file after a run whose worker did not die."""
    (Path(run_dir) / INFLIGHT_FILE).unlink(missing_ok=True)
