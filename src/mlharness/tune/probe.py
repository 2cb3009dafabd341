"""One probe: a short, real run of the harness whose result tune reads, kept under ``_tune/``.

Probes are ordinary run directories (``<output_dir>/_tune/<benchmark>/...``) whose ``run.json``
says ``"purpose": "probe"``, so tools that collect results (submit, store, power) skip them.

A token run's (the LLM benchmarks') metric is tokens/s, but its target is a QPS: a probe's
``value`` is then the samples/s LoadGen logged beside it (``result_completed_samples_per_sec``,
``result_samples_per_second``), its tokens/s kept as ``tokens_per_s``, and its TTFT and TPOT p99
with their limits say which limit an INVALID probe broke.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from mlharness.errors import HarnessError, RunFailed
from mlharness.loadgen.mllog import METRICS, TOKEN_METRICS, parse_detail_log
from mlharness.names import Scenario
from mlharness.runner import RunProgress, execute
from mlharness.spec import RunSpec
from mlharness.tasks import benchmark_rules

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
    #: a token run: its metric (tokens/s; completed tokens/s in Server and Interactive) and the
    #: p99 time to first token and per output token against their limits (Server, Interactive)
    tokens_per_s: float | None = None
    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None
    ttft_limit_ms: float | None = None
    tpot_limit_ms: float | None = None

    @property
    def valid(self) -> bool:
        return self.verdict == "VALID"

    @property
    def tokens(self) -> bool:
        """A token run (an LLM benchmark)."""
        return self.tokens_per_s is not None or self.ttft_p99_ms is not None

    def over_limits(self) -> list[str]:
        """The token limits (``TTFT``, ``TPOT``) whose p99 this probe exceeded (Server and
        Interactive: only they have limits; other scenarios log LoadGen's defaults)."""
        out: list[str] = []
        if Scenario(self.scenario).loadgen != Scenario.SERVER:
            return out
        for name in TOKEN_LIMITS:
            p99, limit = self.token_p99(name), self.token_limit(name)
            if p99 is not None and limit is not None and p99 > limit:
                out.append(name)
        return out

    def token_p99(self, name: str) -> float | None:
        return getattr(self, f"{name.lower()}_p99_ms")

    def token_limit(self, name: str) -> float | None:
        return getattr(self, f"{name.lower()}_limit_ms")

    def why(self) -> str:
        """Why this probe does not count, in plain words (empty for a VALID one): the token
        limits it broke, else LoadGen's first reason."""
        if self.verdict in ("VALID", "MEASURED"):
            return ""
        over = [f"{n} p99 {self.token_p99(n):,.1f} ms over its {self.token_limit(n):,.0f} ms "
                f"limit" for n in self.over_limits()]
        if over:
            what = {"TTFT": "prompts wait for the server", "TPOT": "streams share the server's "
                    "decode steps"}
            cause = " and ".join(what[n] for n in self.over_limits())
            return " and ".join(over) + f" ({cause})"
        return self.reasons[0] if self.reasons else self.verdict

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


PointSink = Callable[[Point], None]
#: the token latency limits of the LLM benchmarks' Server and Interactive, by the names they go by
TOKEN_LIMITS = ("TTFT", "TPOT")
#: the tokens/s metrics (Offline, Server) of a token run
TOKEN_METRIC_KEYS = frozenset(TOKEN_METRICS[s].key for s in ("Offline", "Server"))


def short_of_queries(point: Point) -> bool:
    """INVALID only because the probe was too short for early stopping / the min query count."""
    cond = point.conditions
    return (not point.valid and cond.get("result_perf_constraints_met", True)
            and not (cond.get("early_stopping_met", True)
                     and cond.get("result_min_queries_met", True))
            and cond.get("result_min_duration_met", True))


def token_run(benchmark: str) -> bool:
    """LoadGen judges ``benchmark``'s Server and Interactive runs by TTFT and TPOT and reports
    tokens/s (its rules' ``use_token_latencies``)."""
    bench = benchmark_rules(benchmark)
    return bench is not None and bench.uses_token_latencies


def generation_run(benchmark: str) -> bool:
    """``benchmark`` generates on a server (an LLM or VLM benchmark): a few queries a second."""
    bench = benchmark_rules(benchmark)
    return bench is not None and bench.generates


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
        err = outcome.record.error_message or "no result"
        raise RunFailed(f"{run.scenario} probe failed: {err}", hint=f"see {outcome.run_dir}")
    target = run.target_qps if run.scenario.qps_target else run.target_latency
    lat = result.latencies_ms
    bound = result.effective.get("effective_target_latency_ns")
    tokens = result.tokens_ms
    token_metric = bool(tokens) or result.metric in TOKEN_METRIC_KEYS  # Offline logs no TTFT
    value = result.value
    if token_metric and run.scenario.qps_target:
        value = samples_per_second(outcome.run_dir, run.scenario)
    return Point(
        scenario=run.scenario, target=float(target or 0.0), value=value,
        verdict=outcome.record.verdict()[0], p99_ms=lat.get("p99.00"), mean_ms=lat.get("mean"),
        p50_ms=lat.get("p50.00"),
        bound_ms=float(bound) / 1e6 if bound and run.scenario.loadgen == "Server" else None,
        reasons=list(result.reasons), conditions=dict(result.conditions),
        settings=engine_settings(run), duration_s=outcome.record.duration_s,
        run_dir=str(outcome.run_dir),
        tokens_per_s=result.value if token_metric else None,
        ttft_p99_ms=tokens.get("ttft_p99_ms"), tpot_p99_ms=tokens.get("tpot_p99_ms"),
        ttft_limit_ms=tokens.get("ttft_limit_ms"), tpot_limit_ms=tokens.get("tpot_limit_ms"))


def samples_per_second(run_dir: Path, scenario: str) -> float | None:
    """The samples/s a token run's detail log holds beside its tokens/s: completed samples/s
    (Server, Interactive) or samples/s (Offline), the unit of a target QPS."""
    key = METRICS[Scenario(scenario).loadgen].key
    try:
        found = parse_detail_log(Path(run_dir) / "mlperf_log_detail.txt").values.get(key)
    except HarnessError:
        return None
    return float(found) if isinstance(found, (int, float)) else None
