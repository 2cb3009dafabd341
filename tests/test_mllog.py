import json
from pathlib import Path

import pytest

from mlharness.errors import HarnessError
from mlharness.loadgen.mllog import parse_detail_log, parse_run_logs, read_accuracy_log


def mllog(key: str, value: object, error: bool = False, warning: bool = False) -> str:
    event = {"key": key, "value": value, "time_ms": 1.0, "namespace": "mlperf::logging",
             "event_type": "POINT_IN_TIME",
             "metadata": {"is_error": error, "is_warning": warning, "file": "x.cc",
                          "line_no": 1, "pid": 1, "tid": 1}}
    return ":::MLLOG " + json.dumps(event)


def write_log(tmp_path: Path, lines: list[str]) -> Path:
    (tmp_path / "mlperf_log_detail.txt").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_valid_offline(tmp_path: Path) -> None:
    run = write_log(tmp_path, [
        mllog("effective_scenario", "Offline"), mllog("effective_test_mode", "PerformanceOnly"),
        mllog("result_samples_per_second", 1234.5), mllog("result_validity", "VALID"),
        mllog("result_min_duration_met", True), mllog("result_min_queries_met", True),
        mllog("result_90.00_percentile_latency_ns", 2_000_000),
        mllog("result_mean_latency_ns", 1_000_000),
    ])
    r = parse_run_logs(run)
    assert (r.scenario, r.mode, r.valid, r.value) == ("Offline", "performance", True, 1234.5)
    assert r.unit == "samples/s" and r.valid is True
    assert r.latencies_ms == {"p90.00": 2.0, "mean": 1.0}
    assert r.effective == {"effective_scenario": "Offline",
                           "effective_test_mode": "PerformanceOnly"}


def test_single_stream_metric_is_early_stopping_latency_in_ms(tmp_path: Path) -> None:
    run = write_log(tmp_path, [
        mllog("effective_scenario", "SingleStream"),
        mllog("effective_test_mode", "PerformanceOnly"),
        mllog("early_stopping_latency_ss", 3_500_000), mllog("result_validity", "VALID"),
    ])
    assert parse_run_logs(run).value == 3.5


def test_invalid_reasons_and_errors(tmp_path: Path) -> None:
    run = write_log(tmp_path, [
        mllog("effective_scenario", "Server"), mllog("effective_test_mode", "PerformanceOnly"),
        mllog("effective_target_latency_ns", 15_000_000),
        mllog("result_99.00_percentile_latency_ns", 20_000_000),
        mllog("result_completed_samples_per_sec", 99.0), mllog("result_validity", "INVALID"),
        mllog("result_perf_constraints_met", False), mllog("early_stopping_met", True),
        mllog("error_runtime", "boom", error=True), mllog("warning_generic", "w", warning=True),
    ])
    r = parse_run_logs(run)
    assert r.valid is False
    assert r.conditions == {"result_perf_constraints_met": False, "early_stopping_met": True}
    assert any("p99 latency 20.000 ms is over the 15 ms bound" in x for x in r.reasons)
    assert r.errors == ["error_runtime: boom"] and r.warnings == ["warning_generic: w"]
    assert any("1 LoadGen error(s)" in x for x in r.reasons)


def test_valid_flag_with_errors_is_not_valid(tmp_path: Path) -> None:
    run = write_log(tmp_path, [
        mllog("effective_scenario", "Offline"), mllog("effective_test_mode", "PerformanceOnly"),
        mllog("result_validity", "VALID"), mllog("error_x", "bad", error=True)])
    assert parse_run_logs(run).valid is False


def test_accuracy_mode_has_no_validity(tmp_path: Path) -> None:
    run = write_log(tmp_path, [mllog("effective_scenario", "Offline"),
                               mllog("effective_test_mode", "AccuracyOnly")])
    r = parse_run_logs(run)
    assert r.mode == "accuracy" and r.valid is None and not r.errors


def test_torn_last_line_is_tolerated(tmp_path: Path) -> None:
    run = write_log(tmp_path, [mllog("effective_scenario", "Offline"), ':::MLLOG {"key": "res'])
    log = parse_detail_log(run / "mlperf_log_detail.txt")
    assert log.values["effective_scenario"] == "Offline"
    assert parse_run_logs(run).reasons == ["LoadGen wrote no result (the test did not finish)"]


def test_missing_detail_log_is_a_harness_error(tmp_path: Path) -> None:
    with pytest.raises(HarnessError):
        parse_run_logs(tmp_path)


def test_accuracy_log_hex_decoding(tmp_path: Path) -> None:
    path = tmp_path / "mlperf_log_accuracy.json"
    path.write_text('[\n{ "seq_id" : 0, "qsl_idx" : 7, "data" : "0000803F" }\n]\n')
    assert read_accuracy_log(path) == [(7, b"\x00\x00\x80\x3f")]
    path.write_text("[\n")
    with pytest.raises(HarnessError, match="not valid JSON"):
        read_accuracy_log(path)
