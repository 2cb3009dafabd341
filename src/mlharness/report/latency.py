"""Per-query latencies a run kept, and the latency figures of its detail log.

LoadGen writes per-sample timings only into ``mlperf_log_trace.json`` (``mlharness run --trace``):
each sample is a Chrome-trace async begin event ``"name":"Sample","ph":"b"`` at ``ts`` (µs, the
query's scheduled time on the trace clock) whose args hold ``issue_start_ns`` and ``complete_ns``,
both relative to that scheduled time, so ``complete_ns`` is the sample's latency as LoadGen
counts it (``loadgen/loadgen.cc`` SampleComplete, ``loadgen/logging.cc``). The file is not strict JSON (some string args are double-quoted),
so it is read line by line. The detail log only has the summary percentiles.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_SAMPLE = re.compile(r'"name":"Sample".*?"ph":"b".*?"ts":([\d.]+).*?"complete_ns":(\d+)')
MAX_SAMPLES = 2_000_000  # enough for minutes of a fast run; the rest is not read


@dataclass
class QueryLatencies:
    issued_s: list[float]  # scheduled time since the first query, s
    latency_ms: list[float]


def trace_latencies(run_dir: Path) -> QueryLatencies | None:
    """Per-sample latencies from the run's trace, or None when it kept none."""
    path = Path(run_dir) / "mlperf_log_trace.json"
    if not path.is_file() or path.stat().st_size == 0:
        return None
    issued, latency = [], []
    with path.open(errors="replace") as fh:
        for line in fh:
            if '"Sample"' not in line:
                continue
            m = _SAMPLE.search(line)
            if m:
                issued.append(float(m.group(1)) / 1e6)
                latency.append(int(m.group(2)) / 1e6)
                if len(latency) >= MAX_SAMPLES:
                    break
    if not latency:
        return None
    first = min(issued)
    return QueryLatencies([t - first for t in issued], latency)


def percentile_rows(latencies_ms: dict[str, float]) -> list[tuple[str, float]]:
    """(label, ms) for the percentiles LoadGen reported, in order, then the mean."""
    pct = sorted((p, v) for k, v in latencies_ms.items() if (p := _percent(k)) is not None)
    rows = [(f"p{p:g}", v) for p, v in pct]
    if "mean" in latencies_ms:
        rows.append(("mean", latencies_ms["mean"]))
    return rows


def _percent(key: str) -> float | None:
    """99.0 for ``p99.00``; None for a key that is not a plain percentile (``mean``, or another
    LoadGen's ``pfirst_token_99.00``)."""
    try:
        return float(key[1:]) if key.startswith("p") else None
    except ValueError:
        return None
