"""A result in the endpoints format (the v6.1 checker's second format; ``rules/endpoints.py``),
written from mlharness's own runs: LoadGen's logs of the performance run, the task's score of
the accuracy run.

The files take the shapes MLCommons' endpoints client writes (``commands/benchmark/execute.py``:
``config.yaml`` its resolved configuration, ``metrics/report.py`` ``Report.to_json``:
``performance/result_summary.json``, ``commands/benchmark/accuracy.py``
``write_accuracy_results``: ``accuracy/accuracy_results.json``, ``compliance/result.py``:
``audit/audit_<test>.json``), with LoadGen's numbers in the places the checker reads
(``ENDPOINTS_MAPPINGS``): the seeds LoadGen ran with as the client's scheduler and data-loader
seeds, LoadGen's latency percentiles as the early-stopping percentiles (LoadGen's own early
stopping already judged the run), a duration that gives back LoadGen's samples per second.
An ``mlharness`` section in each file says where the numbers came from; the runs' LoadGen logs
go beside them (``loadgen/``), where the checker does not look.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlharness import __version__
from mlharness.files import write_json_atomic, write_text_atomic
from mlharness.loadgen.mllog import parse_detail_log
from mlharness.rules import endpoints
from mlharness.rules.model import BenchmarkRules
from mlharness.submission.files import copy_file
from mlharness.submission.runs import Run

#: LoadGen's percentiles, as endpoints names them
PERCENTILES = {"50.0": "50.00", "90.0": "90.00", "95.0": "95.00", "97.0": "97.00",
               "99.0": "99.00", "99.9": "99.90"}
#: what each endpoints series is in LoadGen's detail log: (min, max, mean, percentile pattern)
SERIES = {
    "latency": ("result_min_latency_ns", "result_max_latency_ns", "result_mean_latency_ns",
                "result_{p}_percentile_latency_ns"),
    "ttft": ("result_first_token_min_latency_ns", "result_first_token_max_latency_ns",
             "result_first_token_mean_latency_ns", "result_first_token_{p}_percentile_latency_ns"),
    "tpot": ("result_time_to_output_token_min", "result_time_to_output_token_max",
             "result_time_to_output_token_mean", "result_time_per_output_token_{p}_percentile_ns"),
}
#: the endpoints dataset names of the benchmarks' reference configs (examples/0*/)
DATASETS = {"qwen3-vl-235b-a22b": "shopify_product_catalogue::q3vl",
            "llama3.1-8b": "cnn_dailymail::llama3_8b", "llama3.1-8b-edge": "cnn_dailymail::llama3_8b"}
LOADGEN_COPIES = ("mlperf_log_summary.txt", "mlperf_log_detail.txt", "user.conf", "accuracy.txt")


def _series(values: dict[str, Any], name: str) -> dict[str, Any]:
    low, high, mean, pattern = SERIES[name]
    if values.get(mean) is None:
        return {}
    percentiles = {k: values.get(pattern.format(p=p)) for k, p in PERCENTILES.items()}
    percentiles = {k: v for k, v in percentiles.items() if v is not None}
    return {"min": values.get(low), "max": values.get(high), "median": percentiles.get("50.0"),
            "avg": values.get(mean), "percentiles": percentiles,
            "early_stopping_percentiles": dict(percentiles)}


def _online(scenario: str) -> bool:
    return scenario in ("Server", "Interactive")


def _counts(values: dict[str, Any]) -> tuple[int, float | None, float | None]:
    """Samples issued, samples per second and tokens per second of a LoadGen performance log."""
    issued = int(values.get("generated_query_count", 0)) * int(
        values.get("generated_samples_per_query", 1))
    if values.get("effective_scenario") == "Offline":
        return issued, values.get("result_samples_per_second"), values.get(
            "result_tokens_per_second")
    return issued, values.get("result_completed_samples_per_sec"), values.get(
        "result_completed_tokens_per_second")


def summary(perf: Run, scenario: str) -> dict[str, Any]:
    """``performance/result_summary.json`` of the performance run."""
    values = parse_detail_log(perf.path / "mlperf_log_detail.txt").values
    issued, qps, tps = _counts(values)
    duration = round(issued / qps * 1e9) if qps else None
    mean_tokens = tps / qps if tps and qps else None
    online = _online(scenario)
    return {
        "version": __version__, "git_sha": None, "test_started_at": 0,
        "test_datetime": values.get("test_datetime"),
        "n_samples_issued": issued, "n_samples_completed": issued,
        "n_samples_failed": int(values.get("num_errors", 0) or 0),
        "duration_ns": duration, "state": "complete", "complete": True,
        "ttft": _series(values, "ttft"), "tpot": _series(values, "tpot"),
        "latency": _series(values, "latency"),
        "output_sequence_lengths": {"avg": mean_tokens} if mean_tokens else {},
        "input_sequence_lengths": {}, "legacy_loadgen_window_duration_ns": None,
        "qps": qps, "tps": tps, "finish_reason_counts": {},
        "run_config": {"load_pattern": _load_pattern(values, online),
                       "scheduler_random_seed": values.get("effective_schedule_rng_seed"),
                       "dataloader_random_seed": values.get("effective_sample_index_rng_seed")},
        "mlharness": _provenance(perf, values),
    }


def _load_pattern(values: dict[str, Any], online: bool) -> dict[str, Any]:
    if online:
        return {"type": "poisson", "target_qps": values.get("effective_target_qps")}
    return {"type": "max_throughput"}


def _provenance(run: Run, values: dict[str, Any]) -> dict[str, Any]:
    return {"source": "LoadGen logs of an mlharness run, in the endpoints format",
            "run": run.path.name, "mode": str(getattr(run.mode, "value", run.mode)),
            "loadgen_version": values.get("loadgen_version"),
            "result_validity": values.get("result_validity"),
            "effective_scenario": values.get("effective_scenario"),
            "early_stopping_percentiles": "LoadGen's percentiles (its early stopping judged "
            "the run)"}


def config(bench: BenchmarkRules, scenario: str, perf: Run) -> dict[str, Any]:
    """``config.yaml``: the run as the endpoints client's configuration would describe it."""
    values = parse_detail_log(perf.path / "mlperf_log_detail.txt").values
    backend = perf.record.backend or {}
    online = _online(scenario)
    dataset = DATASETS.get(bench.name, bench.dataset or bench.name)
    accuracy = {"name": dataset, "type": "accuracy",
                "accuracy_config": {"eval_method": _eval_method(bench), "num_repeats": 1}}
    return {
        "name": f"{bench.name}-{scenario.lower()}-mlharness",
        "version": "1.0",
        "type": "online" if online else "offline",
        "model_params": {"name": backend.get("served_model") or bench.name,
                         "max_new_tokens": (perf.record.task or {}).get(
                             "max_new_tokens",
                             bench.generation.max_new_tokens if bench.generation else None),
                         "streaming": "on" if online else "off"},
        "datasets": [{"name": dataset, "type": "performance"}, accuracy],
        "settings": {
            "runtime": {"min_duration_ms": values.get("effective_min_duration_ms"),
                        "max_duration_ms": values.get("effective_max_duration_ms"),
                        "n_samples_to_issue": values.get("effective_min_query_count"),
                        "scheduler_random_seed": values.get("effective_schedule_rng_seed"),
                        "dataloader_random_seed": values.get("effective_sample_index_rng_seed")},
            "load_pattern": _load_pattern(values, online)},
        "endpoint_config": {"endpoints": list(backend.get("endpoints") or []),
                            "api_type": "openai"},
        "report_dir": ".",
        "mlharness": {**_provenance(perf, values), "mlharness_version": __version__,
                      "benchmark": bench.name, "scenario": scenario,
                      "backend": backend.get("name")},
    }


def _eval_method(bench: BenchmarkRules) -> str:
    return {"F1_HIERARCHICAL": "shopify_category_f1", "ROUGE1": "rouge"}.get(
        bench.accuracy[0].metric, "pass_at_1")


def score(bench: BenchmarkRules, acc: Run, total: int) -> Any:
    """The accuracy entry's ``score`` as the reference client's scorer gives it: qwen3-vl's F1
    (a fraction), ROUGE as ``RougeScorer`` returns it (text values, percent), an exact match
    as a fraction."""
    result = acc.record.accuracy
    if result is None:
        return None
    metrics = (result.details or {}).get("metrics", {})
    if bench.accuracy[0].metric == "ROUGE1" and metrics:
        out: dict[str, Any] = {name: f"{round(float(metrics[key]), 4)}"
                               for name, key in (("rouge1", "ROUGE1"), ("rouge2", "ROUGE2"),
                                                 ("rougeL", "ROUGEL"), ("rougeLsum", "ROUGELSUM"))
                               if key in metrics}
        if "GEN_LEN" in metrics:
            out["gen_len"] = f"{int(metrics['GEN_LEN'])}"
        out["gen_num"] = total
        return out
    if result.metric == "F1_HIERARCHICAL":
        return result.value
    return result.value / 100.0


def accuracy_results(bench: BenchmarkRules, scenario: str, acc: Run) -> dict[str, Any]:
    """``accuracy/accuracy_results.json`` of the accuracy run."""
    values = parse_detail_log(acc.path / "mlperf_log_detail.txt").values
    total = int(values.get("effective_accuracy_sample_count")
                or values.get("qsl_reported_total_count") or 0)
    value = score(bench, acc, total)
    entry = {"dataset_name": DATASETS.get(bench.name, bench.dataset or bench.name),
             "extractor": "IdentityExtractor",
             "score": value, "unit_samples": total, "num_repeats": 1, "total_samples": total,
             "complete": True, "dataset_type": "accuracy",
             "response_counts": {"issued": total, "scored": total, "empty": 0, "missing": 0}}
    out: dict[str, Any] = {}
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        out["average_accuracy"] = value
    out["accuracy_scores"] = [entry]
    out["mlharness"] = {**_provenance(acc, values), "scenario": scenario,
                        "accuracy_txt": (acc.record.accuracy.text if acc.record.accuracy else "")}
    return out


def write(scen_dir: Path, bench: BenchmarkRules, scenario: str, perf: Run, acc: Run,
          audits: dict[str, bool] | None = None, facts: endpoints.EndpointsFormat | None = None
          ) -> list[str]:
    """The result under ``scen_dir`` in the endpoints format; returns the audits written."""
    import yaml  # lazy: pyyaml writes only this format

    facts = facts or endpoints.load()
    scenario = str(getattr(scenario, "value", scenario))  # a Scenario enum: its name
    write_text_atomic(scen_dir / "config.yaml",
                      yaml.safe_dump(config(bench, scenario, perf), sort_keys=False))
    write_json_atomic(scen_dir / endpoints.SUMMARY, summary(perf, scenario))
    write_json_atomic(scen_dir / endpoints.ACCURACY, accuracy_results(bench, scenario, acc))
    written = []
    for test, passed in (audits or {}).items():
        name = facts.audits.get(test)
        if name is None:
            continue
        write_json_atomic(scen_dir / endpoints.AUDIT_DIR / f"audit_{name}.json",
                          {"test": name, "passed": passed,
                           "mlharness": {"test": test, "source": "the verification of an "
                                         "mlharness audit run"}})
        written.append(test)
    for run, part in ((perf, "performance"), (acc, "accuracy")):
        for name in LOADGEN_COPIES:
            if (run.path / name).is_file():
                copy_file(run.path / name, scen_dir / "loadgen" / part / name)
    return written
