"""Offline: the sustained samples/s, measured by probes long enough to be past warm-up.

An Offline run issues ``1.1 x min_duration x target_qps`` samples in one query and is INVALID if
it finishes before ``min_duration`` (``loadgen/test_settings_internal.cc``, ``loadgen/results.cc``).
So the target must be at least what the system sustains; a higher one only makes the run longer.
Each probe is long enough to be VALID; an invalid one (finished early) is repeated, aiming higher.
"""

from __future__ import annotations

from mlharness.spec import RunSpec
from mlharness.tasks import benchmark_rules
from mlharness.tune.probe import Point, PointSink, ProgressSink, probe

PROBE_MS = 1000  # quick probes (a --test run measuring its own target)
TUNE_PROBE_MS = 3000  # mlharness tune's probes: longer, so the estimate is steadier
START_QPS = 1000.0
#: the first probe of an LLM benchmark (a token run): an LLM completes a few samples a second,
#: and a probe at START_QPS would generate 1.1 x 1000 x its duration answers (minutes to hours on
#: a CPU); from a low start the probes aim higher by their own measured rate (a few short probes)
TOKEN_START_QPS = 1.0
MARGIN = 1.5  # target = fastest rate seen x MARGIN, so noise cannot make the run too short
#: after quick probes: a loaded machine's Offline rate swings by 3x from one second to the next;
#: too high a target only lengthens a 2 s --test run (to about 2 x 1.1 x QUICK_MARGIN s)
QUICK_MARGIN = 3.0


def peak_qps(points: list[Point]) -> float:
    """The fastest rate any probe saw (a too-short probe's rate is a real measurement too)."""
    return max((p.value for p in points if p.value), default=0.0)


def probe_offline_qps(spec: RunSpec, attempts: int = 5, progress: ProgressSink | None = None,
                      on_point: PointSink | None = None, probe_ms: int = PROBE_MS
                      ) -> tuple[float, list[Point]]:
    """Measured Offline samples/s of ``spec``'s task, model and backend, and the points."""
    note = on_point or (lambda p: None)
    target = spec.target_qps if isinstance(spec.target_qps, float) else start_qps(spec)
    points: list[Point] = []
    for _ in range(attempts):
        point = probe(spec, progress, scenario="Offline", min_duration=probe_ms,
                      min_query_count=None, max_query_count=None, target_qps=target,
                      target_latency=None, server_latency=None)
        points.append(point)
        note(point)
        if not point.value:
            break
        if point.valid:
            return point.value, points
        target = max(point.value * MARGIN, target * 2)  # finished early: aim higher
    return points[-1].value or 0.0, points


def start_qps(spec: RunSpec) -> float:
    """The first probe's target when none is given: low for an LLM benchmark."""
    bench = benchmark_rules(spec.benchmark, spec.round)
    return TOKEN_START_QPS if bench is not None and bench.generates else START_QPS


def target_qps(points: list[Point], margin: float) -> float:
    """The target for a run: the fastest rate the probes saw x ``margin``."""
    return round(peak_qps(points) * margin, 1)


def offline_target_qps(spec: RunSpec, progress: ProgressSink | None = None,
                       on_point: PointSink | None = None) -> float:
    """A target QPS that makes a --test Offline run of ``spec`` last its min duration."""
    _, points = probe_offline_qps(spec, progress=progress, on_point=on_point)
    return target_qps(points, QUICK_MARGIN)
