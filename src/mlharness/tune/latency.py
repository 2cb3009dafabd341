"""SingleStream / MultiStream: the expected-latency hint for ``user.conf``, measured.

LoadGen sizes a SingleStream/MultiStream test from the hint: it generates about
``min_duration / expected_latency`` queries up front and issues them one after another
(``loadgen/test_settings_internal.cc``). A hint above the real latency runs out of queries before
the min duration (INVALID); one below only generates spare queries. So the hint is the measured
per-query latency times a margin below 1, floored so the generated query set stays small.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from mlharness.errors import RunFailed
from mlharness.runner import RunProgress, execute
from mlharness.spec import RunSpec

PROBE_QUERIES = 64  # a fixed number of back-to-back queries, whatever the latency
ROUGH_HINT_MS = 1000.0  # high hint: the probe issues exactly its query count
MARGIN = 0.5  # twice the queries needed: a run up to 2x faster than the probe still lasts
#: LoadGen keeps every generated query in memory (about 500 bytes each): cap the set it builds
MAX_GENERATED_QUERIES = 4_000_000


def probe_latency_ms(spec: RunSpec, progress: Callable[[RunProgress], None] | None = None
                     ) -> float:
    """Measured per-query latency (ms) of ``spec``'s scenario: the lower of median and mean."""
    probe = spec.replace(mode="performance", valid=False, min_duration=0,
                         min_query_count=PROBE_QUERIES, max_query_count=PROBE_QUERIES,
                         target_latency=ROUGH_HINT_MS, target_qps=None, server_latency=None,
                         audit_config=None, output_dir=Path(spec.output_dir) / "_tune",
                         purpose="probe")
    record = execute(probe, progress)
    result = record.result
    values = [v for v in ((result.latencies_ms.get("p50.00"), result.latencies_ms.get("mean"))
                          if result else ()) if v]
    if record.status != "ok" or not values:
        err = (record.record.error or {}).get("message", "no latency in the logs")
        raise RunFailed(f"{spec.scenario} latency probe failed: {err}",
                        hint=f"see {record.run_dir}")
    return min(values)


def latency_target_ms(spec: RunSpec, min_duration_ms: float,
                      progress: Callable[[RunProgress], None] | None = None) -> float:
    """The expected-latency hint (ms) that lets a run of ``spec`` reach ``min_duration_ms``."""
    hint = probe_latency_ms(spec, progress) * MARGIN
    floor = min_duration_ms / MAX_GENERATED_QUERIES
    return float(f"{max(hint, floor):.4g}")
