"""Tune one scenario: measure the target a run of it needs (dispatch to latency/offline/server)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from mlharness.names import LOADGEN_SCENARIOS, Scenario
from mlharness.tasks import benchmark_rules
from mlharness.spec import RunSpec
from mlharness.tune import latency, offline, server
from mlharness.tune.probe import Point, PointSink, ProgressSink, engine_settings


#: the order a benchmark's scenarios are tuned in
ORDER = (Scenario.SINGLE_STREAM, Scenario.MULTI_STREAM, Scenario.OFFLINE, Scenario.SERVER,
         Scenario.INTERACTIVE)


def benchmark_scenarios(benchmark: str, round: str | None = None) -> list[Scenario]:
    """The scenarios ``tune -s all`` measures for ``benchmark``: every scenario a system type
    of its rules requires or allows (an LLM: Offline, Server, Interactive; the edge variant
    SingleStream, Offline), or the four LoadGen scenarios for one without rules (the demo)."""
    found = benchmark_rules(benchmark, round)
    if found is None:
        return list(LOADGEN_SCENARIOS)
    named = {s for table in (found.required_scenarios, found.optional_scenarios)
             for scenarios in table.values() for s in scenarios}
    return [s for s in ORDER if s in named]


def target_field(scenario: str) -> str:
    """The RunSpec field that holds the scenario's target."""
    return "target_qps" if Scenario(scenario).qps_target else "target_latency"


@dataclass
class Tuned:
    """The target tune chose for one benchmark x scenario x engine settings, and how."""

    benchmark: str
    scenario: str
    target: float | None  # what to put in the run (target_qps or target_latency)
    measured: float | None  # what was measured (samples/s, best VALID QPS, or latency ms)
    method: str
    settings: dict[str, Any] = field(default_factory=dict)
    points: list[Point] = field(default_factory=list)
    measured_at: str = field(
        default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    #: what ended or bounded the search, in words (a token limit; Server and Interactive)
    note: str = ""

    @property
    def field(self) -> str:
        return target_field(self.scenario)

    def better_than(self, other: Tuned | None) -> bool:
        """Higher throughput (Server, Offline) or lower latency (SingleStream, MultiStream)."""
        if self.measured is None or self.target is None:
            return False
        if other is None or other.measured is None or other.target is None:
            return True
        if Scenario(self.scenario).qps_target:
            return self.measured > other.measured
        return self.measured < other.measured


def tune_scenario(spec: RunSpec, *, quick: bool = False, margin: float | None = None,
                  confirm_ms: int = 0, progress: ProgressSink | None = None,
                  on_point: PointSink | None = None) -> Tuned:
    """Measure the target for ``spec.scenario`` with short probes of ``spec``'s set-up.

    ``quick``: fewer, shorter probes and wider margins (a run measuring its own target).
    ``margin``: Server only, target = best VALID QPS x ``margin`` (default: the search's).
    ``confirm_ms``: Server only (not quick), hold that target this long, stepping down by the
    margin until VALID (0: don't).
    """
    s = spec.scenario
    settings = engine_settings(spec)
    note = ""
    measured: float | None
    target: float | None
    if Scenario(s).latency_metric:
        measured, points = latency.probe_latency(spec, progress, on_point)
        target = float(f"{measured * latency.MARGIN:.4g}")
        method = (f"{len(points)} probes (last {latency.PROBE_MS} ms); expected latency = "
                  f"measured per-query latency x {latency.MARGIN}")
    elif s == "Offline":
        probe_ms = offline.PROBE_MS if quick else offline.TUNE_PROBE_MS
        factor = offline.QUICK_MARGIN if quick else offline.MARGIN
        measured, points = offline.probe_offline_qps(spec, progress=progress, on_point=on_point,
                                                     probe_ms=probe_ms)
        target = offline.target_qps(points, factor) if measured else None
        method = (f"{len(points)} probes of {probe_ms} ms; target = fastest samples/s seen "
                  f"x {factor}")
    else:
        search = (server.quick_server_search(spec, progress, on_point) if quick
                  else server.search_server_qps(spec, progress=progress, on_point=on_point))
        if margin is not None:
            search.margin = margin
        if confirm_ms and not quick:
            search = server.confirm_target(spec, search, confirm_ms, progress, on_point)
        points = search.points
        note = search.note
        measured = search.best.target if search.best else None
        target = search.target_qps
        method = (f"bracketing search, {len(points)} probes; target = best VALID target QPS "
                  f"x {search.margin}")
        if search.confirmed is not None:
            method += f", held VALID for {confirm_ms / 1000:g} s"
            if search.confirmed.target < (measured or 0) * search.margin * 0.99:
                method += f" after stepping down by x {search.margin}"
    return Tuned(spec.benchmark, s, target, measured, method, settings, points, note=note)
