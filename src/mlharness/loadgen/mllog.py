"""Read LoadGen's output files: the MLLOG detail log, the summary and the accuracy log.

Keys and formats: ``loadgen/logging.h`` (MLLOG lines), ``loadgen/results.cc`` (result_* keys),
``loadgen/logging.cc`` (accuracy log: uppercase hex in ``data``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, NamedTuple

from pydantic import Strict, StrictBool

from mlharness.errors import HarnessError
from mlharness.names import LATENCY_SCENARIOS

#: a number as JSON writes it (an int is a number too), never a string
StrictFloat = Annotated[float, Strict()]

MLLOG_PREFIX = ":::MLLOG"

#: metric per scenario: (detail-log key, unit, divisor). The submission checker reports
#: SingleStream ``early_stopping_latency_ss`` and MultiStream ``early_stopping_latency_ms``
#: in ms (``tools/submission/submission_checker/constants.py`` RESULT_FIELD_NEW).
class Metric(NamedTuple):
    key: str  # detail-log key
    unit: str  # how mlharness shows it
    divisor: float  # log value / divisor = shown value
    summary_unit: str  # the checker's UNIT_DICT name


#: the one scenario -> metric table (compliance and the submission summary derive theirs)
METRICS = {
    "Offline": Metric("result_samples_per_second", "samples/s", 1.0, "Samples/s"),
    "Server": Metric("result_completed_samples_per_sec", "completed samples/s", 1.0, "Queries/s"),
    "SingleStream": Metric("early_stopping_latency_ss", "latency p90 ms (early stopping)", 1e6,
                           "Latency (ms)"),
    "MultiStream": Metric("early_stopping_latency_ms", "latency p99 ms (early stopping)", 1e6,
                          "Latency (ms)"),
}

#: the metric of a run with ``use_token_latencies`` (the LLM benchmarks; the checker's
#: RESULT_FIELD_BENCHMARK_OVERWRITE): output tokens per second, completed ones in Server; the
#: edge SingleStream (llama3.1-8b-edge) the p90 latency, in ms as the checker divides it
TOKEN_METRICS = {
    "Offline": Metric("result_tokens_per_second", "tokens/s", 1.0, "Tokens/s"),
    "Server": Metric("result_completed_tokens_per_second", "completed tokens/s", 1.0,
                     "Tokens/s"),
    "SingleStream": Metric("result_90.00_percentile_latency_ns", "latency p90 ms", 1e6,
                           "Latency (ms)"),
}
#: detail-log keys of the token latencies (loadgen/results.cc), ns -> the names run.json keeps
TOKEN_LATENCIES = {
    "result_first_token_99.00_percentile_latency_ns": "ttft_p99_ms",
    "result_first_token_mean_latency_ns": "ttft_mean_ms",
    "result_time_per_output_token_99.00_percentile_ns": "tpot_p99_ms",
    "result_time_to_output_token_mean": "tpot_mean_ms",
    "requested_server_ttft_latency": "ttft_limit_ms",
    "requested_server_tpot_latency": "tpot_limit_ms",
}


@dataclass
class DetailLog:
    values: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def parse_detail_log(path: Path) -> DetailLog:
    """Parse ``mlperf_log_detail.txt``: last value per key, plus error and warning events."""
    log = DetailLog()
    if not path.is_file():
        raise HarnessError(f"LoadGen detail log not found: {path}",
                           hint="the test did not start; see the error above")
    for line_no, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        if not line.startswith(MLLOG_PREFIX):
            continue
        try:
            event = json.loads(line[len(MLLOG_PREFIX):])
        except json.JSONDecodeError:
            # a run killed mid-write may leave a torn last line; keep what we have
            log.warnings.append(f"line {line_no}: unreadable MLLOG line")
            continue
        key, value = event.get("key"), event.get("value")
        meta = event.get("metadata") or {}
        if meta.get("is_error"):
            log.errors.append(f"{key}: {value}")
        elif meta.get("is_warning"):
            log.warnings.append(f"{key}: {value}")
        log.values[key] = value
    return log


@dataclass
class LoadGenResult:
    """The parsed outcome of one test. Read back from run.json, a value of the wrong type
    (``"valid": "yes"``, ``"value": "12"``) makes the record untrusted instead of being
    coerced (strict fields)."""

    scenario: str
    mode: str
    valid: StrictBool | None  # None in accuracy mode (LoadGen reports no validity there)
    metric: str | None
    unit: str | None
    value: StrictFloat | None
    conditions: dict[str, bool] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    latencies_ms: dict[str, float] = field(default_factory=dict)
    effective: dict[str, Any] = field(default_factory=dict)
    #: a token run's TTFT / TPOT (p99, mean) and their limits, in ms (the LLM benchmarks)
    tokens_ms: dict[str, float] = field(default_factory=dict)
    #: a token run's samples per second beside its tokens/s (Offline: both are logged)
    samples_per_s: StrictFloat | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)



_CONDITIONS = {
    "result_min_duration_met": "min duration not met (run was shorter than min_duration)",
    "result_min_queries_met": "min query count not met",
    # the latency bound before early stopping: when both fail, the bound is the cause
    "result_perf_constraints_met": "latency constraint not met (p99 over the target)",
    "early_stopping_met": "early stopping not met (too few queries for the latency estimate)",
}


def _truthy(v: Any) -> bool:
    return v is True or (isinstance(v, str) and v.lower() == "true")


def result_from_detail(log: DetailLog) -> LoadGenResult:
    v = log.values
    scenario = str(v.get("effective_scenario", v.get("requested_scenario", "")))
    mode_raw = str(v.get("effective_test_mode", ""))
    mode = "accuracy" if "Accuracy" in mode_raw else "performance"
    tokens = bool(v.get("requested_use_token_latencies"))
    found = (TOKEN_METRICS if tokens else METRICS).get(scenario)
    metric, unit, div = (found.key, found.unit, found.divisor) if found else (None, None, 1.0)
    value = v.get(metric) if metric else None
    result = LoadGenResult(
        scenario=scenario, mode=mode, valid=None, metric=metric, unit=unit,
        value=float(value) / div if value is not None else None,
        errors=list(log.errors), warnings=list(log.warnings),
        effective={k: val for k, val in v.items() if k.startswith("effective_")},
    )
    for key, val in v.items():
        if key.startswith("result_") and key.endswith("_percentile_latency_ns") \
                and not key.startswith("result_first_token_"):
            pct = key[len("result_"):-len("_percentile_latency_ns")]
            result.latencies_ms[f"p{pct}"] = float(val) / 1e6
    if "result_mean_latency_ns" in v:
        result.latencies_ms["mean"] = float(v["result_mean_latency_ns"]) / 1e6
    for key, name in TOKEN_LATENCIES.items():
        if tokens and isinstance(v.get(key), (int, float)):
            result.tokens_ms[name] = float(v[key]) / 1e6
    rate = v.get("result_samples_per_second")
    if tokens and isinstance(rate, (int, float)) and not isinstance(rate, bool):
        result.samples_per_s = float(rate)
    if mode == "performance":
        for key, reason in _CONDITIONS.items():
            if key in v:
                met = _truthy(v[key])
                result.conditions[key] = met
                if not met:
                    result.reasons.append(reason)
        _add_hints(result, v)
        validity = v.get("result_validity")
        result.valid = validity == "VALID" and not result.errors
        if validity is None:
            result.reasons.append("LoadGen wrote no result (the test did not finish)")
        if result.errors:
            result.reasons.append(f"{len(result.errors)} LoadGen error(s): {result.errors[0]}")
        if validity == "INVALID" and not result.reasons:
            result.reasons.append("LoadGen marked the result INVALID")
    return result


def _add_hints(result: LoadGenResult, v: dict[str, Any]) -> None:
    """Turn LoadGen's raw conditions into reasons that say what to change."""
    reasons = []
    ran_out = any("Ran out of generated queries" in e for e in result.errors)
    target_qps = v.get("effective_target_qps")
    for reason in result.reasons:
        samples_per_s = v.get("result_samples_per_second")
        if reason.startswith("min duration") and result.scenario == "Offline" and isinstance(
                samples_per_s, (int, float)) and samples_per_s > 0:
            reason = (f"min duration not met: measured {samples_per_s:,.0f} samples/s, so the "
                      f"target of {float(target_qps or 0):,.0f} QPS issued too few samples; "
                      f"re-run with --target-qps {samples_per_s * 1.2:.0f} or more")
        elif reason.startswith("min duration") and ran_out and (
                result.scenario in LATENCY_SCENARIOS):
            mean = result.latencies_ms.get("mean")
            reason = ("LoadGen ran out of queries before the min duration: the --target-latency "
                      "hint is above the real latency" +
                      (f"; re-run with --target-latency {mean * 0.8:.3g}" if mean else ""))
        elif reason.startswith("min duration") and ran_out and result.scenario == "Server":
            reason = "LoadGen ran out of queries before the min duration; raise --target-qps"
        elif reason.startswith("latency constraint") and result.tokens_ms:
            reason = "; ".join(_token_reasons(result.tokens_ms)) or reason
        elif reason.startswith("latency constraint"):
            p99 = result.latencies_ms.get("p99.00")
            bound = float(v.get("effective_target_latency_ns", 0)) / 1e6
            reason = (f"p99 latency {p99:.3f} ms is over the {bound:g} ms bound: lower "
                      "--target-qps" if p99 is not None else reason)
        reasons.append(reason)
    result.reasons = reasons
    if ran_out:  # explained above; LoadGen logs it as an error
        result.errors = [e for e in result.errors if "Ran out of generated queries" not in e]


def _token_reasons(t: dict[str, float]) -> list[str]:
    """Which token limit a Server/Interactive run broke, in words with what to change."""
    out = []
    for what, name in (("TTFT", "ttft"), ("TPOT", "tpot")):
        p99, limit = t.get(f"{name}_p99_ms"), t.get(f"{name}_limit_ms")
        if p99 is not None and limit is not None and p99 > limit:
            fix = ("lower --target-qps (fewer prompts queue for the server)" if name == "ttft"
                   else "lower --target-qps (fewer streams share the server's decode steps)")
            out.append(f"{what} p99 {p99:,.1f} ms is over the {limit:,.0f} ms limit: {fix}")
    return out


def parse_run_logs(outdir: Path) -> LoadGenResult:
    """Parse the logs LoadGen wrote into ``outdir``."""
    return result_from_detail(parse_detail_log(outdir / "mlperf_log_detail.txt"))


def read_accuracy_log(path: Path) -> list[tuple[int, bytes]]:
    """``mlperf_log_accuracy.json`` -> ``[(qsl_idx, response bytes)]`` in file order."""
    if not path.is_file():
        raise HarnessError(f"accuracy log not found: {path}",
                           hint="run with --mode accuracy first")
    try:
        entries = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise HarnessError(f"{path} is not valid JSON ({exc})",
                           hint="the run may have been cut off; re-run the accuracy test") from exc
    return [(int(e["qsl_idx"]), bytes.fromhex(e["data"])) for e in entries]
