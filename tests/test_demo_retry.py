"""`mlharness demo` (the first README command) when a performance run comes out INVALID for a
latency bound or early stopping: it measures again, retries at 70 % of the new target, says so
and keeps the INVALID attempt. The first attempt fails on purpose: a Server target several
times what the demo model serves here (~50 k QPS on the 2-core test machine), not a loaded
machine."""

from __future__ import annotations

import json
from pathlib import Path

from mlharness.cli import demo
from mlharness.cli.main import main
from mlharness.spec import RunSpec

TOO_HIGH_QPS = 300000.0


def test_an_invalid_demo_run_is_measured_again_and_retried_lower(tmp_path: Path, capsys,
                                                                 monkeypatch) -> None:
    monkeypatch.setattr(demo, "DEMO_RUNS", (
        {"scenario": "Server", "mode": "performance", "target_qps": TOO_HIGH_QPS},))
    monkeypatch.setattr(demo, "RETRIES", 1)
    code = main(["demo", "--no-progress", "--output-dir", str(tmp_path / "runs")])
    out = capsys.readouterr().out
    runs = sorted((tmp_path / "runs" / "demo").iterdir())
    first = json.loads((runs[0] / "run.json").read_text())
    assert first["spec"]["target_qps"] == TOO_HIGH_QPS and first["result"]["valid"] is False
    assert "Server INVALID at target qps 300000" in out and "measuring again" in out
    if len(runs) == 1:  # a loaded machine: measuring again found no VALID Server target
        assert "could not measure a Server target" in out and code == 1, out
        return  # the INVALID attempt is the result shown, and the screen says why
    assert len(runs) == 2, runs  # the INVALID attempt is kept beside the retry
    retry = json.loads((runs[1] / "run.json").read_text())
    assert "retried: Server after" in out and runs[0].name in out
    # the retry: a fresh measurement (probes in _tune/), at 70 % of it
    assert retry["spec"]["target_qps"] < TOO_HIGH_QPS
    assert retry["settings"]["sources"]["target_qps"] == "measured"
    assert list((tmp_path / "runs" / "_tune" / "demo").iterdir())
    assert code == (0 if retry["result"]["valid"] else 1)


def test_the_demo_server_run_issues_what_early_stopping_needs(tmp_path: Path, capsys,
                                                              monkeypatch) -> None:
    """A low measured Server target (a busy machine) gets queries enough for early stopping
    (10 s of them here: 2,000 at 200 QPS, where the 2 s of a --test run held 400, too few, and
    662 failed with two queries over the 10 ms bound), not fewer than 662 at any target."""
    monkeypatch.setattr(demo, "DEMO_RUNS", (
        {"scenario": "Server", "mode": "performance", "target_qps": 200.0},))
    main(["demo", "--no-progress", "--output-dir", str(tmp_path / "runs")])
    capsys.readouterr()
    first = min((tmp_path / "runs" / "demo").iterdir())
    record = json.loads((first / "run.json").read_text())
    assert record["spec"]["min_query_count"] == 2000
    assert record["settings"]["values"]["min_query_count"] == 2000
    detail = (first / "mlperf_log_detail.txt").read_text()
    issued = json.loads(next(line.split(":::MLLOG", 1)[1] for line in detail.splitlines()
                             if '"result_query_count"' in line))["value"]
    assert issued >= 2000
    low = RunSpec(benchmark="demo", scenario="Server", target_qps=20.0)
    assert demo.server_length(low, 662).min_query_count == 662
    assert demo.server_length(RunSpec(benchmark="demo", scenario="Offline"), 662) \
        == RunSpec(benchmark="demo", scenario="Offline")
