"""Server: the highest target QPS that is VALID under the benchmark's latency bound.

A bracketing search over short probes: grow the target geometrically until a probe is INVALID,
then bisect (geometric mean) between the best VALID and the lowest INVALID target until they are
within ``precision``. An INVALID probe above a VALID one is repeated once before it counts (a
shared machine's bursts make single probes near the edge noisy). Each probe's verdict is LoadGen's own, so the bound is the one the round's
``mlperf.conf`` (or ``--server-latency``) sets and early stopping counts: a probe whose latencies
met the bound but whose query count was too small for early stopping is repeated once, longer,
before it counts as INVALID. Every point is kept.

The LLM benchmarks (token runs) search Server and Interactive the same way, with LoadGen's
verdict on both token limits, p99 time to first token (TTFT) and per output token (TPOT):

* each probe issues at least 460 queries (``TEST_MIN_TOKEN_SERVER_QUERIES``: early stopping on
  both), so its length is set by that count at low rates, not by its duration, and the slowest
  rate probed is ``460 / TOKEN_MAX_PROBE_S``;
* the limit an INVALID probe broke steers the next probe: TPOT grows with the streams the server
  decodes at once (TTFT with the prompts waiting), convexly, so the next rate is an estimate of
  where that p99 meets its limit from the probes on either side (:func:`_between`); TTFT over
  its limit while the server fell behind is a queue that grows, so the next rate is just under
  the rate it did complete (its capacity). A guess stays off the bracket's ends (``KEEP_OFF``
  of it, in log), and after two guesses that moved the same end the search bisects once, so the
  bracket keeps shrinking whatever the guesses;
* a limit still broken at a rate ``growth / 2`` or more times lower, its p99 barely lower
  (``FLAT``), does not depend on the load: the search stops and says so (``ServerSearch.note``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from mlharness.loadgen.settings import TEST_MIN_TOKEN_SERVER_QUERIES
from mlharness.names import Scenario
from mlharness.spec import RunSpec
from mlharness.tune.latency import rough_latency
from mlharness.tune.probe import (Point, PointSink, ProgressSink, probe, short_of_queries,
                                  generation_run, token_run)

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
#: token runs (the LLMs): a probe needs 460 queries for early stopping on TTFT and TPOT, and an LLM
#: server completes a few queries a second, so probes may last longer (the slowest rate probed is
#: 460 / this: 1.5 QPS; 7.7 QPS for a quick search)
TOKEN_MAX_PROBE_S = 300.0
TOKEN_QUICK_MAX_PROBE_S = 60.0
#: a limit whose p99 at a rate ``growth`` x lower is still this share of it or more does not
#: depend on the load (token runs)
FLAT = 0.8
#: the next guess between a VALID and an INVALID rate stays this far (a share of the bracket, in
#: log) from either end
KEEP_OFF = 0.1


@dataclass
class ServerSearch:
    """The outcome of a search: the best VALID point (None if none was) and every point."""

    best: Point | None
    points: list[Point] = field(default_factory=list)
    margin: float = MARGIN
    confirmed: Point | None = None  # the long probe that held the target (confirm_target)
    confirm_failed: bool = False  # every long probe was INVALID: no target
    #: how the search ended, in words, when a probe's reason ended it (a token limit that no
    #: lower rate meets) or bounded it (the limit broken just above the best VALID rate)
    note: str = ""

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


def probe_queries(spec: RunSpec) -> int:
    """Queries a Server probe issues at least: what early stopping needs (token runs: 460)."""
    return TEST_MIN_TOKEN_SERVER_QUERIES if token_run(spec.benchmark) else PROBE_QUERIES


def max_probe_seconds(spec: RunSpec, quick: bool = False) -> float:
    """The longest a probe may last (sets the slowest rate a search probes): longer for a
    benchmark that generates on a server."""
    if generation_run(spec.benchmark):
        return TOKEN_QUICK_MAX_PROBE_S if quick else TOKEN_MAX_PROBE_S
    return 20.0 if quick else MAX_PROBE_S


def searched_scenario(spec: RunSpec) -> Scenario:
    """The scenario the search probes: ``spec``'s when LoadGen runs it as Server (Server,
    Interactive), else Server."""
    scenario = Scenario(spec.scenario)
    return scenario if scenario.loadgen == Scenario.SERVER else Scenario.SERVER


def _probe_at(spec: RunSpec, qps: float, probe_ms: int | None, progress: ProgressSink | None,
              note: PointSink, points: list[Point], max_probe_s: float) -> Point:
    queries = probe_queries(spec)
    changes = dict(scenario=searched_scenario(spec), target_qps=round(qps, 2),
                   target_latency=None, min_query_count=queries, max_query_count=None,
                   min_duration=probe_ms)
    point = _behind(probe(spec, progress, **changes))
    points.append(point)
    note(point)
    if short_of_queries(point) and 4 * queries / qps <= max_probe_s:
        # early stopping needs more queries: once more, 4x as many
        changes["min_query_count"] = 4 * queries
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
                      margin: float = MARGIN, max_probe_s: float | None = None,
                      recheck_invalid: bool = True, progress: ProgressSink | None = None,
                      on_point: PointSink | None = None) -> ServerSearch:
    """Bracketing search for the highest VALID target QPS of ``spec``'s Server (or
    Interactive) scenario.

    ``probe_ms`` is each probe's min duration (None: the --test length, 2 s);
    ``max_probe_s`` the longest a probe may last (None: :func:`max_probe_seconds`);
    ``recheck_invalid=False`` takes an INVALID above a VALID at its word. Without
    ``start_qps`` the search starts at half of what one worker does when queries come one by
    one (measured by a quick SingleStream probe).
    """
    note = on_point or (lambda p: None)
    max_probe_s = max_probe_s or max_probe_seconds(spec)
    scenario = searched_scenario(spec)
    points: list[Point] = []
    valid: list[float] = []
    invalid: list[float] = []
    at: dict[float, Point] = {}  # the probe that counted at each rate
    moved: list[str] = []  # which end of the bracket each probe moved (lo, hi)
    ended = ""
    floor = probe_queries(spec) / max_probe_s
    qps = start_qps or _start_from_latency(spec, progress, note, points)
    qps = max(qps, floor)
    for _ in range(max_probes):
        point = _probe_at(spec, qps, probe_ms, progress, note, points, max_probe_s)
        if recheck_invalid and not point.valid and valid and qps > max(valid):
            # an INVALID above a VALID may be one burst of noise on a shared machine: the edge
            # counts only once a second probe at that rate agrees
            point = _probe_at(spec, qps, probe_ms, progress, note, points, max_probe_s)
        (valid if point.valid else invalid).append(qps)
        at[qps] = point
        lo = max(valid) if valid else None
        above = [q for q in invalid if lo is None or q > lo]  # noise: ignore INVALIDs below lo
        hi = min(above) if above else None
        if lo is not None and hi is not None:
            moved.append("lo" if point.valid else "hi")
        if hi is None:
            assert lo is not None  # a probe is VALID or INVALID
            qps = lo * growth  # no INVALID yet: grow
        elif lo is None:
            ended = _load_independent(at, sorted(invalid), growth)
            if ended:
                break  # a token limit lower rates do not meet
            if hi <= floor:
                break  # INVALID even at the lowest rate we can measure in time
            qps = max(_below(at[hi], hi / growth), floor)  # no VALID yet: shrink
        elif hi / lo <= precision:
            break
        else:
            below = [q for q in valid if q < lo]
            steered = _between(at[lo], at[hi], at[max(below)] if below else None)
            # a guess that moved the same end twice running bisects instead (the bracket then
            # halves, in log, at least every other probe however good or bad the guesses)
            same_end = len(moved) >= 2 and moved[-1] == moved[-2]
            qps = math.sqrt(lo * hi) if same_end else steered
    best = max((p for p in points if p.valid and p.scenario == scenario),
               key=lambda p: p.target, default=None)
    if not ended and best is not None:
        edge = min((p for p in points if p.scenario == scenario and not p.valid
                    and p.target > best.target and p.over_limits()),
                   key=lambda p: p.target, default=None)
        if edge is not None:
            ended = f"the edge above {best.target:,.1f} QPS: at {edge.target:,.1f} QPS {edge.why()}"
    return ServerSearch(best, points, margin, note=ended)


def _behind_rate(point: Point) -> float | None:
    """The rate a probe that fell behind its target did complete (its capacity), else None."""
    if point.value and point.value < SUSTAINED * point.target:
        return point.value
    return None


def _below(point: Point, default: float) -> float:
    """The next rate under an INVALID token probe with no VALID one yet: just under what it
    completed when it fell behind (TTFT queueing), else ``default`` (one growth step down)."""
    done = _behind_rate(point) if point.tokens else None
    return SUSTAINED * done if done else default


def _between(lo: Point, hi: Point, under: Point | None = None) -> float:
    """The next rate between the best VALID (``lo``) and the lowest INVALID (``hi``) rate;
    ``under``: the best VALID rate below ``lo``, if any.

    Plain runs: the geometric mean. Token runs steer by the limit ``hi`` broke. A token
    latency's p99 grows convexly with the rate (more streams in flight, each one slower; a queue
    that builds up), so the rate where it meets its limit lies between the chord from ``lo`` to
    ``hi`` (which reaches the limit too early) and the line through ``under`` and ``lo`` (too
    late); the guess is the geometric mean of the two (of the chord's and ``hi`` without
    ``under``). TTFT over its limit while the server fell behind is a queue that grows: the
    guess is then just under the rate it completed. The guess keeps KEEP_OFF of the bracket
    (in log) from either end, so the bracket shrinks whatever the guess.
    """
    mid = math.sqrt(lo.target * hi.target)
    if not hi.tokens:
        return mid
    guesses = []
    done = _behind_rate(hi)
    for name in hi.over_limits():
        if name == "TTFT" and done:
            guesses.append(SUSTAINED * done)
            continue
        a, b, limit = lo.token_p99(name), hi.token_p99(name), hi.token_limit(name)
        if a is None or b is None or limit is None or not a < limit < b:
            continue
        early = lo.target + (hi.target - lo.target) * (limit - a) / (b - a)
        late = hi.target
        c = under.token_p99(name) if under is not None else None
        if under is not None and c is not None and c < a:
            late = min(late, lo.target + (lo.target - under.target) * (limit - a) / (a - c))
        guesses.append(math.sqrt(early * max(early, late)))
    if not guesses and done:
        guesses.append(SUSTAINED * done)
    if not guesses:
        return mid
    span = math.log(hi.target / lo.target)
    low, high = (lo.target * math.exp(KEEP_OFF * span),
                 lo.target * math.exp((1 - KEEP_OFF) * span))
    return min(max(min(guesses), low), high)


def _load_independent(at: dict[float, Point], invalid: list[float], growth: float) -> str:
    """Words for a token limit broken at two rates at least ``growth`` / 2 apart whose p99 at the
    lower rate is still FLAT of the p99 at the higher: lowering the rate does not meet it."""
    if len(invalid) < 2:
        return ""
    low, high = at[invalid[0]], at[invalid[-1]]
    if high.target < low.target * growth / 2 or not low.tokens or _behind_rate(low):
        return ""  # rates too close to tell, or the lower one still overloads the server
    for name in low.over_limits():
        a, b = low.token_p99(name), high.token_p99(name)
        if a is None or b is None or name not in high.over_limits() or a < FLAT * b:
            continue
        per = "first token" if name == "TTFT" else "output token"
        return (f"{name} p99 stays over its {low.token_limit(name):,.0f} ms limit whatever the "
                f"load ({a:,.1f} ms at {low.target:,.1f} QPS, {b:,.1f} ms at "
                f"{high.target:,.1f} QPS): the server takes too long per {per} for "
                f"{low.scenario}, and no target QPS helps; a faster server or model (or another "
                "scenario) is needed")
    return ""


def _start_from_latency(spec: RunSpec, progress: ProgressSink | None, note: PointSink,
                        points: list[Point]) -> float:
    """Half the rate one worker sustains one query at a time (a rough SingleStream probe)."""
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
                             max_probes=10, max_probe_s=max_probe_seconds(spec, quick=True),
                             recheck_invalid=False, progress=progress, on_point=on_point)
