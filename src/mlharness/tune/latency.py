"""SingleStream / MultiStream: the expected-latency hint for ``user.conf``, from measured latencies.

LoadGen sizes a SingleStream/MultiStream test from the hint: it generates about
``min_duration / expected_latency`` queries up front and issues them one after another
(``loadgen/test_settings_internal.cc``). A hint above the real latency runs out of queries before
the min duration (INVALID); one below only generates spare queries. So the hint is the measured
per-query latency times a margin below 1 (:mod:`mlharness.tune.resolve` raises a hint whose
query set would not fit in memory, up to the measured latency, or refuses).
"""

from __future__ import annotations

from mlharness.loadgen.settings import (BYTES_PER_QUERY, MEMORY_SHARE,  # noqa: F401 - here too
                                        MIN_QUERY_BUDGET, max_generated_queries)
from mlharness.spec import RunSpec
from mlharness.tune.probe import Point, PointSink, ProgressSink, probe, short_of_queries

#: hint = measured latency x MARGIN. LoadGen itself generates queries for twice the min duration
#: at the hint (loadgen/loadgen.cc GenerateQueries, duration_multiplier), so with 0.5 a system up
#: to 4x faster at run time than while probing still reaches the min duration (2x at a hint equal
#: to the measured latency)
MARGIN = 0.5
#: to save memory, resolve.fit_query_set may raise a hint up to the measured latency x FIT_LIMIT:
#: LoadGen's 2x then still covers a run 1.33x faster than the probe
FIT_LIMIT = 1.5
ROUGH_QUERIES = 64  # first probe: a fixed number of queries, whatever the latency
PROBE_MS = 1000  # second probe: long enough to be past warm-up
ROUGH_HINT_MS = 1000.0  # a high hint: the rough probe issues exactly its query count
_COMMON = {"target_qps": None, "server_latency": None}


def smallest_fitting_hint(min_duration_ms: float, budget: int) -> float:
    """The lowest SingleStream/MultiStream hint (ms) whose query set stays within ``budget``."""
    return 2 * min_duration_ms / budget


def measured_latency_ms(point: Point) -> float:
    """Per-query time to plan with: the lower of median and mean (outliers only lengthen runs)."""
    values = [v for v in (point.p50_ms, point.mean_ms) if v]
    if not values:
        raise ValueError("probe reported no latency")
    return min(values)


def rough_latency(spec: RunSpec, progress: ProgressSink | None = None,
                  scenario: str = "SingleStream") -> Point:
    """A first, cheap probe: a fixed number of queries one after another."""
    point = probe(spec, progress, scenario=scenario, min_duration=0,
                  min_query_count=ROUGH_QUERIES, max_query_count=ROUGH_QUERIES,
                  target_latency=ROUGH_HINT_MS, **_COMMON,
                  **({"batch_size": None} if scenario == "SingleStream" else {}))
    if short_of_queries(point):
        # short on purpose (MultiStream's early stopping needs 662 queries): its latencies are
        # what it is for, not LoadGen's verdict on its length, nor its early-stopping estimate
        point.verdict, point.reasons = "MEASURED", []
        point.value = measured_latency_ms(point)
    return point


def probe_latency(spec: RunSpec, progress: ProgressSink | None = None,
                  on_point: PointSink | None = None) -> tuple[float, list[Point]]:
    """Measured per-query latency (ms) of ``spec``'s scenario, and the probes' points."""
    note = on_point or (lambda p: None)
    rough = rough_latency(spec, progress, spec.scenario)
    note(rough)
    hint = max(measured_latency_ms(rough) * MARGIN, PROBE_MS / MIN_QUERY_BUDGET)
    fine = probe(spec, progress, min_duration=PROBE_MS, min_query_count=ROUGH_QUERIES,
                 max_query_count=None, target_latency=float(f"{hint:.4g}"), **_COMMON)
    note(fine)
    return measured_latency_ms(fine), [rough, fine]
