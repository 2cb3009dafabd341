"""One probe: a short, real run of the harness whose result tune reads, kept under ``_tune/``.

Probes are ordinary run directories (``<output_dir>/_tune/<benchmark>/...``) whose ``run.json``
says ``"purpose": "probe"``, so tools that collect results (submit, store, power) skip them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from mlharness.errors import RunFailed
from mlharness.runner import RunProgress, execute
from mlharness.spec import RunSpec

ProgressSink = Callable[[RunProgress], None]
TUNE_DIR = "_tune"
PROBE = "probe"  # run.json "purpose" of a probe

#: RunSpec fields that are engine settings (what a grid search varies and a SUT config keeps)
ENGINE_SETTINGS = ("batch_size", "workers", "threads", "instances", "threads_per_instance",
                   "precision", "device", "backend", "length_sort")


@dataclass
class Point:
    """What one probe measured."""

    scenario: str
    target: float  # target QPS (Server, Offline) or expected-latency hint in ms
    value: float | None  # the scenario's metric (samples/s, or latency ms)
    verdict: str  # VALID | INVALID | BEHIND
    p99_ms: float | None = None
    mean_ms: float | None = None
    p50_ms: float | None = None
    bound_ms: float | None = None  # Server latency bound LoadGen applied
    reasons: list[str] = field(default_factory=list)
    conditions: dict[str, bool] = field(default_factory=dict)  # LoadGen's result_* conditions
    settings: dict[str, Any] = field(default_factory=dict)
    duration_s: float | None = None
    run_dir: str = ""

    @property
    def valid(self) -> bool:
        return self.verdict == "VALID"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


PointSink = Callable[[Point], None]


def short_of_queries(point: Point) -> bool:
    """INVALID only because the probe was too short for early stopping / the min query count."""
    cond = point.conditions
    return (not point.valid and cond.get("result_perf_constraints_met", True)
            and not (cond.get("early_stopping_met", True)
                     and cond.get("result_min_queries_met", True))
            and cond.get("result_min_duration_met", True))


def engine_settings(spec: RunSpec) -> dict[str, Any]:
    """The engine settings of ``spec`` that are set (for points and SUT configs)."""
    return {k: getattr(spec, k) for k in ENGINE_SETTINGS if getattr(spec, k) is not None}


def probe(spec: RunSpec, progress: ProgressSink | None = None, **changes: Any) -> Point:
    """Run ``spec`` with ``changes`` as a --test performance probe and return what it measured.

    Raises RunFailed when the probe run itself fails (backend raised, stall): a measurement
    that did not happen is not a data point.
    """
    run = spec.replace(**{"mode": "performance", "valid": False, "purpose": PROBE,
                          "audit_config": None, "label": None, "sut": None, "sut_conf": {},
                          "output_dir": Path(spec.output_dir) / TUNE_DIR, **changes})
    outcome = execute(run, progress)
    result = outcome.result
    if outcome.status != "ok" or result is None:
        err = (outcome.record.error or {}).get("message", "no result")
        raise RunFailed(f"{run.scenario} probe failed: {err}", hint=f"see {outcome.run_dir}")
    target = run.target_qps if run.scenario.qps_target else run.target_latency
    lat = result.latencies_ms
    bound = result.effective.get("effective_target_latency_ns")
    return Point(
        scenario=run.scenario, target=float(target or 0.0), value=result.value,
        verdict=outcome.record.verdict()[0], p99_ms=lat.get("p99.00"), mean_ms=lat.get("mean"),
        p50_ms=lat.get("p50.00"),
        bound_ms=float(bound) / 1e6 if bound and run.scenario == "Server" else None,
        reasons=list(result.reasons), conditions=dict(result.conditions),
        settings=engine_settings(run), duration_s=outcome.record.duration_s,
        run_dir=str(outcome.run_dir))
