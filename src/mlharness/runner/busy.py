"""Whether a process is busy: its CPU time, as Linux's ``/proc/PID/stat`` counts it.

The stall clock asks it while the worker sets up (loading the data set or the model): importing
transformers and torch took over a minute on two cores beside twelve busy processes, with the
worker computing all along. A process waiting on a socket or a lock spends no CPU time.
"""

from __future__ import annotations

import os
from pathlib import Path

#: CPU seconds a setup phase must spend since the clock last moved for it to count as progress
#: (a process that waits polls now and then; one that imports or loads keeps a core busy)
BUSY_CPU_S = 0.2


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds of every thread of ``pid``; None where /proc cannot tell
    (another OS, the process gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces: fields after its ')'
    fields = stat[stat.rfind(")") + 2:].split()
    try:  # fields 14 and 15 of proc(5): utime and stime, in clock ticks
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError):
        return None
