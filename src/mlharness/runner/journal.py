"""The one writer of a run's record: every kind of run (plain, power, audit, probe) opens its
``run.json`` at ``"running"`` and finishes it exactly once, each time also in the result index.

A journal owns the typed :class:`RunRecord`; callers fill in its fields and never write
``run.json`` themselves.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from mlharness.record import RunRecord, Status, owner_fields
from mlharness.runner.rundir import now_iso
from mlharness.store import record_run


class Journal:
    """The record of one run directory, from its start to its end."""

    def __init__(self, run_dir: Path, record: RunRecord) -> None:
        self.run_dir = Path(run_dir)
        self.record = record
        self._t0 = time.monotonic()

    @classmethod
    def open(cls, run_dir: Path, record: RunRecord) -> Journal:
        """Start ``record`` in ``run_dir``: ``running``, with its start time and the process
        that writes it (so readers tell a live run from a crashed one), saved and indexed."""
        record.status = "running"
        record.started = now_iso()
        for key, value in owner_fields().items():
            setattr(record, key, value)
        journal = cls(run_dir, record)
        journal.save()
        return journal

    @property
    def finished(self) -> bool:
        return self.record.status != "running"

    def save(self) -> None:
        """Write the record as it is now (atomically) and index it."""
        self.record.save(self.run_dir)
        record_run(self.run_dir)  # the result index (mlharness.store)

    def finish(self, status: Status, error: dict[str, Any] | None = None) -> None:
        """End the run with ``status`` (``ok``, ``failed``, ``error``, ``interrupted``)."""
        rec = self.record
        rec.status, rec.error, rec.finished = status, error, now_iso()
        rec.duration_s = round(time.monotonic() - self._t0, 3)
        self.save()
