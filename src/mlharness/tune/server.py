"""Server: the highest target QPS that is VALID under the benchmark's latency bound.

A bracketing search over short probes: grow the target geometrically until a probe is INVALID,
then bisect (geometric mean) between the best VALID and the lowest INVALID target until they are
within ``precision``. An INVALID probe above a VALID one is repeated once before it counts (a
shared machine's bursts make single probes near the edge noisy). Each probe's verdict is LoadGen's own, so the bound is the one the round's
``mlperf.conf`` (or ``--server-latency``) sets and early stopping counts: a probe whose latencies
met the bound but whose query count was too small for early stopping is repeated once, longer,
before it counts as INVALID. Every point is kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from mlharness.spec import RunSpec
from mlharness.tune.probe import Point, PointSink, ProgressSink, probe, short_of_queries

START_QPS = 100.0  # when no latency was measured to start from
GROWTH = 4.0
PRECISION = 1.05  # stop when lowest INVALID / best VALID <= this
MAX_PROBES = 16
#: queries per probe: early stopping (p99, 99% confidence) needs 459 queries with none over the
#: bound and 662 with one (``loadgen/early_stopping.cc``; the 662 is MultiStream's known minimum)
PROBE_QUERIES = 662
MARGIN = 0.8  # target written for a full-length run = best VALID x MARGIN
#: ... after a quick search (a --test run measuring its own target first). Wide on purpose:
#: on a shared machine the capacity a 1 s probe saw can halve a second later (other processes),
#: and a Server run at the edge then falls behind; a --test run checks a set-up, not the peak
QUICK_MARGIN = 0.25
#: ... and its search stops at the first bracket (one growth step), without probing an INVALID
#: twice: the target is x 0.25 of a VALID rate either way (a --test run, `make demo`, waits)
QUICK_PRECISION = GROWTH
#: a probe must complete this share of its target rate: below it the system falls behind and
#: its queue grows, which a short probe can hide under a generous latency bound
SUSTAINED = 0.9
MAX_PROBE_S = 60.0  # no probe below PROBE_QUERIES / MAX_PROBE_S QPS (too slow to measure)
#: tune holds its chosen target this long before writing it: short probes see a burst capacity
#: that a 600 s run does not sustain (demo here: 38.6 k QPS VALID in 2 s probes, 30.9 k INVALID
#: in 60 s and in 600 s, 24.7 k VALID in 60 s)
CONFIRM_MS = 60_000
MAX_CONFIRMS = 4  # step down by the margin at most this many times


@dataclass
class ServerSearch:
    """The outcome of a search: the best VALID point (None if none was) and every point."""

    best: Point | None
    points: list[Point] = field(default_factory=list)
    margin: float = MARGIN
    confirmed: Point | None = None  # the long probe that held the target (confirm_target)
    confirm_failed: bool = False  # every long probe was INVALID: no target

    @property
    def target_qps(self) -> float | None:
        if self.confirmed is not None:
            return round(self.confirmed.target, 1)
        if self.confirm_failed or self.best is None:
            return None
        return round(self.best.target * self.margin, 1)


def confirm_target(spec: RunSpec, search: ServerSearch, confirm_ms: int = CONFIRM_MS,
                   progress: ProgressSink | None = None,
                   on_point: PointSink | None = None) -> ServerSearch:
    """Hold best VALID x margin for ``confirm_ms``; while INVALID, step down by the margin."""
    if search.best is None:
        return search
    qps = search.best.target * search.margin
    for _ in range(MAX_CONFIRMS):
        point = _probe_at(spec, qps, confirm_ms, progress, on_point or (lambda p: None),
                          search.points, max_probe_s=confirm_ms / 1000)
        if point.valid:
            search.confirmed = point
            return search
        qps *= search.margin
    search.confirm_failed = True
    return search


def _probe_at(spec: RunSpec, qps: float, probe_ms: int | None, progress: ProgressSink | None,
              note: PointSink, points: list[Point], max_probe_s: float) -> Point:
    changes = dict(scenario="Server", target_qps=round(qps, 2), target_latency=None,
                   min_query_count=PROBE_QUERIES, max_query_count=None, min_duration=probe_ms)
    point = _behind(probe(spec, progress, **changes))
    points.append(point)
    note(point)
    if short_of_queries(point) and 4 * PROBE_QUERIES / qps <= max_probe_s:
        # early stopping needs more queries: once more, 4x as many
        changes["min_query_count"] = 4 * PROBE_QUERIES
        point = _behind(probe(spec, progress, **changes))
        points.append(point)
        note(point)
    return point


def _behind(point: Point) -> Point:
    """Mark a VALID probe that did not keep up with its target as BEHIND (not VALID)."""
    if point.valid and point.value is not None and point.value < SUSTAINED * point.target:
        point.verdict = "BEHIND"
        point.reasons.append(f"completed {point.value:,.1f}/s of a {point.target:,.1f} QPS "
                             "target: the system falls behind (LoadGen said VALID only because "
                             "the probe was short)")
    return point


def search_server_qps(spec: RunSpec, start_qps: float | None = None, *,
                      precision: float = PRECISION, growth: float = GROWTH,
                      max_probes: int = MAX_PROBES, probe_ms: int | None = None,
                      margin: float = MARGIN, max_probe_s: float = MAX_PROBE_S,
                      recheck_invalid: bool = True, progress: ProgressSink | None = None,
                      on_point: PointSink | None = None) -> ServerSearch:
    """Bracketing search for the highest VALID Server target QPS of ``spec``.

    ``probe_ms`` is each probe's min duration (None: the --test length, 2 s);
    ``recheck_invalid=False`` takes an INVALID above a VALID at its word. Without
    ``start_qps`` the search starts at half of what one worker does when queries come one by
    one (measured by a quick SingleStream probe).
    """
    note = on_point or (lambda p: None)
    points: list[Point] = []
    valid: list[float] = []
    invalid: list[float] = []
    floor = PROBE_QUERIES / max_probe_s
    qps = start_qps or _start_from_latency(spec, progress, note, points)
    qps = max(qps, floor)
    for _ in range(max_probes):
        point = _probe_at(spec, qps, probe_ms, progress, note, points, max_probe_s)
        if recheck_invalid and not point.valid and valid and qps > max(valid):
            # an INVALID above a VALID may be one burst of noise on a shared machine: the edge
            # counts only once a second probe at that rate agrees
            point = _probe_at(spec, qps, probe_ms, progress, note, points, max_probe_s)
        (valid if point.valid else invalid).append(qps)
        lo = max(valid) if valid else None
        above = [q for q in invalid if lo is None or q > lo]  # noise: ignore INVALIDs below lo
        hi = min(above) if above else None
        if hi is None:
            assert lo is not None  # a probe is VALID or INVALID
            qps = lo * growth  # no INVALID yet: grow
        elif lo is None:
            if hi <= floor:
                break  # INVALID even at the lowest rate we can measure in time
            qps = max(hi / growth, floor)  # no VALID yet: shrink
        elif hi / lo <= precision:
            break
        else:
            qps = math.sqrt(lo * hi)
    best = max((p for p in points if p.valid and p.scenario == "Server"),
               key=lambda p: p.target, default=None)
    return ServerSearch(best, points, margin)


def _start_from_latency(spec: RunSpec, progress: ProgressSink | None, note: PointSink,
                        points: list[Point]) -> float:
    """Half the rate one worker sustains one query at a time (a rough SingleStream probe)."""
    from mlharness.tune.latency import rough_latency

    point = rough_latency(spec, progress)
    points.append(point)
    note(point)
    per_query_ms = min(v for v in (point.p50_ms, point.mean_ms, 1000.0) if v)
    return 0.5 * 1000.0 / per_query_ms * max(1, spec.workers)


def quick_server_search(spec: RunSpec, progress: ProgressSink | None = None,
                        on_point: PointSink | None = None) -> ServerSearch:
    """A coarse, fast search (1 s probes, the edge within one growth step) with a wide margin: for
    a run that measures its own target first, where a comfortable VALID matters more than the
    peak (x 0.25 of a VALID rate is far below the edge either way)."""
    return search_server_qps(spec, precision=QUICK_PRECISION, probe_ms=1000, margin=QUICK_MARGIN,
                             max_probes=10, max_probe_s=20.0, recheck_invalid=False,
                             progress=progress,
                             on_point=on_point)
