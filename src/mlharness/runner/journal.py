"""The one writer of a run's record: every kind of run (plain, power, audit, probe) opens its
``run.json`` at ``"running"`` and finishes it exactly once, each time also in the result index.

A journal owns the typed :class:`RunRecord`; callers fill in its fields and never write
``run.json`` themselves.

Two things can keep the record from being written, and each ends the run as failed with one
line (``RunFailed``, exit 3): the run directory was deleted while the run was going (nothing is
written, the directory is not recreated), or the file system refused the final record (a full
disk): then the record is written once more, as failed and naming the problem, atomically and,
failing that, over the old ``run.json`` in place; should that fail too, the record stays at
``"running"`` with the pid of a process that has ended, which every reader sees as crashed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from mlharness.errors import RunFailed
from mlharness.record import RUN_FILE, RunError, RunRecord, Status, owner_fields
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
        """Write the record as it is now (atomically) and index it; RunFailed (the record marked
        failed, nothing written) when the run directory is gone."""
        if not self.run_dir.is_dir():
            message = (f"the run directory {self.run_dir} was deleted while the run was going; "
                       "nothing of the run is kept")
            self.record.status, self.record.error = "failed", RunError(message=message)
            raise RunFailed(message, hint="re-run the test, and leave its directory alone until "
                            "it ends")
        self.record.save(self.run_dir)
        record_run(self.run_dir)  # the result index (mlharness.store)

    def finish(self, status: Status, error: dict[str, Any] | RunError | None = None) -> None:
        """End the run with ``status`` (``ok``, ``failed``, ``error``, ``interrupted``) and, if
        it did not end ok, ``error`` (a mapping holds at least ``message``)."""
        rec = self.record
        rec.status, rec.finished = status, now_iso()
        rec.error = RunError.model_validate(error) if error is not None else None
        rec.duration_s = round(time.monotonic() - self._t0, 3)
        try:
            self.save()
        except OSError as exc:  # e.g. the disk is full: the record must not stay "running"
            self._fail_unsaved(exc)

    def _fail_unsaved(self, exc: OSError) -> None:
        rec = self.record
        why = exc.strerror or str(exc)
        message = f"the run's record could not be saved in {self.run_dir} ({why})"
        rec.status, rec.error = "failed", RunError.model_validate({"message": message,
                                                                   "errno": exc.errno})
        path = self.run_dir / RUN_FILE
        try:
            rec.save(self.run_dir)  # once more (the failed attempt's temporary file is gone)
            saved = True
        except OSError:
            saved = _overwrite_in_place(path, rec)
        if saved:
            record_run(self.run_dir)
        kept = ("run.json records the run as failed" if saved else
                "run.json still says 'running'; readers see it as crashed")
        raise RunFailed(message, hint=f"free some space or write elsewhere ({kept}), then re-run "
                        "the test") from None


def _overwrite_in_place(path: Path, record: RunRecord) -> bool:
    """Write ``record`` over the existing ``path`` without a new file (which a full disk may
    refuse); True when it was written."""
    data = (json.dumps(record.to_dict(), indent=2, default=str) + "\n").encode()
    try:
        with path.open("r+b") as fh:
            fh.write(data)
            fh.truncate()
        return True
    except OSError:
        return False
