"""Reading a run directory's ``run.json`` and deciding whether it can be trusted.

Every reader of run directories (``submit``, ``runs``, ``compare``) goes through
``read_record`` and ``untrusted_reason`` so that a run left at ``"running"`` by a crash, a probe
run or an unreadable file is treated the same way everywhere.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from mlharness.record import RunRecord

#: path components that hold runs made for another purpose than a result
PROBE_DIRS = ("_tune",)
#: ``purpose`` values of a run meant as a result (absent in records written before the field)
RESULT_PURPOSES = (None, "", "result", "run")


def read_record(path: Path) -> RunRecord:
    """``path/run.json`` as the typed record; ConfigError when it is missing, unreadable, not
    ours or of an unknown format (``RunRecord.load``)."""
    return RunRecord.load(Path(path))


def owner_fields() -> dict[str, Any]:
    """What a running record stores so that readers can tell a live run from a dead one."""
    return {"pid": os.getpid(), "host": socket.gethostname()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_alive(pid: Any, host: Any) -> bool:
    """The process a running record names (``owner_fields``) still runs, here."""
    return isinstance(pid, int) and host == socket.gethostname() and _alive(pid)


def running_state(record: RunRecord) -> str:
    """For a record at ``"running"``: ``"live"`` (its process still runs here) or ``"dead"``."""
    return "live" if process_alive(record.pid, record.host) else "dead"


def probe_reason(path: Path, record: RunRecord) -> str | None:
    """Why this run is a probe (tuning or measuring a target), or None for a result run."""
    purpose = record.purpose
    if purpose not in RESULT_PURPOSES:
        return f"a {purpose} run, not a result"
    parts = set(Path(path).parts)
    for name in PROBE_DIRS:
        if name in parts:
            return f"a probe run (under {name}/)"
    return None


def untrusted_reason(path: Path, record: RunRecord) -> str | None:
    """Why this run cannot be used as a result, or None when it can.

    Not trusted: a run still at ``"running"`` (live, or left there by a crash or SIGKILL), any
    status other than ``"ok"``, a probe run, and an ok record without its result.
    """
    status = record.status
    if status == "running":
        if running_state(record) == "live":
            return f"still running (pid {record.pid})"
        return "left at 'running' by a process that died (crash or SIGKILL): never finished"
    if status != "ok":
        err = record.error or {}
        why = err.get("message") if isinstance(err, dict) else None
        return f"status {status!r}" + (f": {why}" if why else "")
    probe = probe_reason(path, record)
    if probe:
        return probe
    mode = record.spec.mode
    if mode == "performance" and not record.result:
        return "no LoadGen result recorded"
    if mode == "accuracy" and not record.accuracy:
        return "no accuracy score recorded"
    return None
