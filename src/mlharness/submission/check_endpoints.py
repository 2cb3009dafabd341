"""Our checks of an endpoints-format result (``rules/endpoints.py``), as the v6.1 checker's
performance, accuracy and compliance checks treat one (``checks/*_check.py``, the
``is_endpoints`` branches), each problem said in words with what fixes it.

What the checker skips for this format is skipped here too (the performance sample count, the
minimum query count, the accuracy log's truncation, user.conf, the QSL seed). Where it has a
quirk we check the intent, as for LoadGen trees: failed samples and an mlharness result that
LoadGen marked INVALID are problems (the checker counts failed samples as LoadGen errors,
which it reports only with ``--submission-exceptions``), and a missing latency or result is a
problem where the checker would stop with a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlharness.rules import endpoints
from mlharness.rules.model import BenchmarkRules, Rules
from mlharness.rules.problems import Problem

FIX_RUN = ("re-run it full length (`mlharness run --benchmark {b} --scenario {s} --mode "
           "performance --valid ...`), then `mlharness submit ... --format endpoints --force`")
FIX_ACC = ("`mlharness run --benchmark {b} --scenario {s} --mode accuracy ...` on the full set, "
           "then `mlharness submit ... --format endpoints --force`")
RESUBMIT = "re-run `mlharness submit ... --format endpoints --force` to write the files again"
NETWORK_SUT_NAME = "Network SUT"


def _num(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def performance_problems(scen_dir: Path, bench: BenchmarkRules, rules: Rules, division: str,
                         where: str, facts: endpoints.EndpointsFormat) -> list[Problem]:
    """The performance check of an endpoints result."""
    log = endpoints.read(scen_dir, "performance", facts)
    v = log.values
    directory = scen_dir.name
    fix = FIX_RUN.format(b=bench.harness, s=directory)
    out = [Problem("endpoints-files", text, where=where, fix=RESUBMIT,
                   meaning="an endpoints result is config.yaml and performance/"
                   "result_summary.json (accuracy/accuracy_results.json for its accuracy)")
           for text in log.problems]
    if not facts.allows(bench.name):
        out.append(Problem("endpoints-model", f"{bench.name} may not use the endpoints format",
                           where=where, meaning=f"the {facts.round} checker accepts it only for "
                           + ", ".join(facts.allowed_models),
                           fix="`mlharness submit ... --format loadgen --force`"))
    scenario = endpoints.checked_scenario(str(v.get("effective_scenario", "")), directory)
    mlh = log.data.get("mlharness") if isinstance(log.data.get("mlharness"), dict) else {}
    if mlh and mlh.get("result_validity") not in (None, "VALID"):
        out.append(Problem("result-invalid", f"LoadGen marked the run behind it "
                           f"{mlh.get('result_validity')}", where=where,
                           meaning="only VALID results count", fix=fix))
    failed = _num(v.get("num_errors") or 0)
    if failed:
        out.append(Problem("endpoints-failed-samples", f"{failed:g} samples failed", where=where,
                           meaning="a result with failed requests cannot be submitted", fix=fix))
    for key in ("sample_index_rng_seed", "schedule_rng_seed"):
        found, expected = v.get(f"effective_{key}"), rules.seeds[key]
        if _int(found) != expected:
            out.append(Problem("wrong-seeds", f"{key} is {found}, {rules.round} expects "
                               f"{expected}", where=where,
                               meaning="config.yaml's dataloader_random_seed and "
                               "scheduler_random_seed stand for LoadGen's sample index and "
                               "schedule seeds, which the round fixes", fix=fix))
    duration = _num(v.get("effective_min_duration_ms"))
    if not duration >= rules.min_duration_ms:
        out.append(Problem(
            "test-duration" if duration < 60000 else "min-duration",
            f"min_duration {duration:g} ms is below the required {rules.min_duration_ms} ms",
            meaning="the rules need every performance run to last at least 600 s", fix=fix,
            where=where))
    if bench.uses_token_latencies:
        out += _token_problems(v, bench, scenario, where, fix)
    else:
        limit = bench.latency_limit(directory) or bench.latency_limit(scenario)
        p99 = _num(v.get("result_99.00_percentile_latency_ns"))
        if limit is not None and p99 != p99:
            out.append(Problem("latency-missing", "the result has no p99 latency", where=where,
                               meaning=f"{bench.name} {directory} is judged on its p99 latency "
                               "(latency.early_stopping_percentiles 99.0); the checker stops "
                               "without it", fix=fix))
        elif limit is not None and p99 > limit:
            out.append(Problem("latency", f"{directory} p99 latency {p99 / 1e6:,.0f} ms over its "
                               f"{limit / 1e6:,.0f} ms limit", where=where,
                               meaning=f"{bench.name} {directory} results must keep the p99 "
                               "end-to-end latency within the round's bound",
                               fix="lower --target-qps until the p99 is within it, then re-run"))
    field = bench.result_fields.get(scenario) or facts.result_field(scenario)
    if field is None or v.get(field) is None:
        out.append(Problem("result-missing", f"no result ({field or scenario})", where=where,
                           meaning="the checker reads the result from qps (or samples over the "
                           "duration offline)", fix=RESUBMIT))
    if division == "network" and NETWORK_SUT_NAME not in str(v.get("sut_name", "")):
        out.append(Problem("network-sut-name", "the result names no network SUT", where=where,
                           meaning="a network-division result must come over the network",
                           fix="submit in the closed or open division"))
    return out


def _token_problems(v: dict[str, Any], bench: BenchmarkRules, scenario: str, where: str,
                    fix: str) -> list[Problem]:
    limit = bench.token_limit(scenario)
    if limit is None:
        return []
    ttft = _num(v.get("result_first_token_99.00_percentile_latency_ns"))
    tpot = _num(v.get("result_time_per_output_token_99.00_percentile_ns"))
    if ttft != ttft or tpot != tpot:
        return [Problem("token-latencies-missing", "the result has no TTFT or TPOT p99",
                        where=where, meaning=f"{bench.name} {scenario} is judged on both",
                        fix=fix)]
    if limit.passes(ttft, tpot):
        return []
    return [Problem("token-latency", f"{scenario} TTFT p99 {ttft / 1e6:.1f} ms (limit "
                    f"{limit.ttft_ns / 1e6:g} ms), TPOT p99 {tpot / 1e6:.2f} ms (limit "
                    f"{limit.tpot_ns / 1e6:g} ms): not both below", where=where,
                    meaning=f"{bench.name} {scenario} results must keep both p99 token "
                    "latencies strictly below the round's limits",
                    fix="lower --target-qps until both are below, then re-run")]


def _numeric(score: Any, metric: str) -> float | None:
    """A score as the checker's ``_numeric_accuracy_score`` reads it."""
    if isinstance(score, bool):
        return None
    if isinstance(score, (int, float)):
        return float(score)
    if isinstance(score, str):
        try:
            return float(score)
        except ValueError:
            return None
    if isinstance(score, dict):
        for key in (metric, metric.lower(), metric.split("_")[-1].lower(), "f1", "score",
                    "accuracy"):
            value = _numeric(score.get(key), metric) if key in score else None
            if value is not None:
                return value
    return None


def accuracy_problems(scen_dir: Path, bench: BenchmarkRules, rules: Rules, division: str,
                      where: str, facts: endpoints.EndpointsFormat,
                      skip_dataset_size: bool = False) -> list[Problem]:
    """The accuracy check of an endpoints result."""
    log = endpoints.read(scen_dir, "accuracy", facts)
    directory = scen_dir.name
    fix = FIX_ACC.format(b=bench.harness, s=directory)
    out = [Problem("endpoints-files", text, where=where, fix=RESUBMIT)
           for text in log.problems if "config.yaml" not in text]
    if not log.scores:
        out.append(Problem("accuracy-missing", "accuracy_results.json has no score", where=where,
                           meaning="every result needs its accuracy run's score", fix=fix))
    elif division != "open" and bench.name == "qwen3-vl-235b-a22b":
        target = bench.accuracy_for(directory)[0]
        value = _numeric(log.scores[0], target.metric)
        if value is None:
            out.append(Problem("accuracy-unreadable", f"the score {log.scores[0]!r} is not a "
                               "number", where=where, meaning="the checker compares it with "
                               "the target", fix=fix))
        elif value < target.value:
            out.append(Problem("accuracy-below-target", f"{target.metric} {value:g} below "
                               f"{target.value:g} ({target.fraction:g} x {target.reference:g})",
                               where=where, meaning="closed results must reach the round's "
                               "accuracy target", fix="improve the model or submit in the open "
                               "division"))
    count = log.values.get("effective_accuracy_sample_count",
                           log.values.get("qsl_reported_total_count"))
    expected = bench.accuracy_count_for(directory)
    if not skip_dataset_size and _num(count) != expected:
        out.append(Problem("accuracy-coverage", f"the accuracy run covered {count} samples, the "
                           f"round's accuracy set has {expected}", where=where,
                           meaning="accuracy must be measured on the complete set", fix=fix))
    return out


def compliance_problems(scen_dir: Path, bench: BenchmarkRules, facts: endpoints.EndpointsFormat,
                        where: str) -> list[Problem]:
    """The audits of an endpoints result (closed and network): ``audit/audit_<name>.json``
    optional, but when present of the right test and passed; TEST09's mean output length."""
    out: list[Problem] = []
    for test in bench.compliance_tests:
        name = facts.audits.get(test)
        path = scen_dir / endpoints.AUDIT_DIR / f"audit_{name}.json"
        fix = (f"`mlharness compliance --audit {test} --reference-perf PERF_RUN --output DIR`, "
               "then submit again")
        if name is None or not path.is_file():
            continue  # optional in this format (only TEST04, not an LLM audit, is required)
        log = endpoints.EndpointsLog()
        data = endpoints.read_json(path, log)
        if log.problems or data.get("test") != name:
            out.append(Problem("compliance-files", f"{path.name} is not the {name} record "
                               f"({'; '.join(log.problems) or data.get('test')})", where=where,
                               fix=fix))
        elif not data.get("passed"):
            out.append(Problem("compliance-failed", f"{test} ({name}) did not pass", where=where,
                               meaning="the audit failed", fix=fix))
    if "TEST09" in bench.compliance_tests and bench.test09_output_tokens:
        mean = _num(endpoints.read(scen_dir, "performance", facts).values.get("mean_output_tokens"))
        low, high = bench.test09_output_tokens["min"], bench.test09_output_tokens["max"]
        if not low <= mean <= high:
            out.append(Problem("compliance-failed", f"TEST09: mean output length {mean:g} "
                               f"outside [{low:g}, {high:g}]", where=where,
                               meaning="the performance run's outputs are of the wrong length",
                               fix=FIX_RUN.format(b=bench.harness, s=scen_dir.name)))
    return out
