"""Server probes split into tune sessions: one `mlharness tune` (or `run --target-qps auto`)
invocation, so that the report draws each search as its own series.

No session id is recorded in a probe's ``run.json``; a session is read from what one invocation
keeps fixed and from time:

* probes whose host or spec differ in anything a search does not vary (everything but the
  target, the query counts and duration, and the engine settings a grid tries) are from
  different sessions;
* among the rest, in start order, a probe that starts more than ``GAP_S`` seconds after every
  earlier probe of the session finished begins a new session (the probes of one search run back
  to back; overlapping probes stay together).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from mlharness.store import IndexedRun

GAP_S = 60.0
#: spec fields a search varies from probe to probe (tune/server.py and the engine grid of
#: tune/probe.py ENGINE_SETTINGS), left out of the session key
VARIED = ("target_qps", "target_latency", "min_query_count", "max_query_count", "min_duration",
          "batch_size", "workers", "threads", "instances", "threads_per_instance", "precision",
          "device", "backend", "length_sort")


@dataclass
class Session:
    label: str
    probes: list[IndexedRun] = field(default_factory=list)


def _time(text: str | None) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp() if text else None
    except ValueError:
        return None


def _key(row: IndexedRun) -> str:
    spec = row.settings.get("spec") or {}
    fixed = {k: v for k, v in spec.items() if k not in VARIED}
    return json.dumps([row.system, fixed], sort_keys=True, default=str)


def tune_sessions(probes: list[IndexedRun]) -> list[Session]:
    """The probes (index rows) grouped into sessions, in the order the sessions started."""
    ordered = sorted(probes, key=lambda r: (r.started or "", r.path))
    open_: dict[str, tuple[Session, float | None]] = {}  # key -> (session, latest finish)
    out: list[Session] = []
    for row in ordered:
        key = _key(row)
        start, end = _time(row.started), _time(row.finished)
        current = open_.get(key)
        if current is None or (start is not None and current[1] is not None
                               and start - current[1] > GAP_S):
            session = Session(f"session {(row.started or '?')[:16].replace('T', ' ')}")
            out.append(session)
            current = (session, None)
        session, latest = current
        session.probes.append(row)
        ends = [t for t in (latest, end, start) if t is not None]
        open_[key] = (session, max(ends) if ends else None)
    return out
