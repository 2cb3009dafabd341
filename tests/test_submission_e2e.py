"""End to end on real LoadGen runs: test-mode runs -> submit -> check reports exactly the duration
problem (ours, and the official checker: tests/referee.py); closed layout with
TEST01/TEST04; the demo benchmark is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import referee
from mlharness import rules
from mlharness.cli.main import main
from mlharness.errors import ConfigError
from mlharness.runner import execute
from mlharness.spec import RunSpec
from mlharness.submission import check_tree, submit
from mlharness.submission.official import run_official
from mlharness.submission.pack import verify_archive
from mlharness.tune import offline_target_qps



def _spec(inputs: dict[str, Path], runs: Path, **kw) -> RunSpec:
    return RunSpec(benchmark="resnet50", scenario="Offline", model=inputs["model"],
                   dataset=inputs["dataset"], cache_dir=inputs["cache"], output_dir=runs,
                   valid=False, **kw)


@pytest.fixture(scope="module")
def resnet_runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from submission_support import make_resnet_inputs

    root = tmp_path_factory.mktemp("resnet")
    inputs = make_resnet_inputs(root)
    runs = root / "runs"
    # measured first (a fixed target is INVALID on a machine faster than assumed); the probes
    # land in runs/_tune/ as probe runs, which submit leaves out
    target = offline_target_qps(_spec(inputs, runs))
    perf = execute(_spec(inputs, runs, target_qps=target))
    for _ in range(2):  # a machine whose load fell after the probes ran faster: too few samples
        if perf.result is None or perf.result.valid is not False:
            break
        shutil.rmtree(perf.run_dir)  # submit takes the one valid run of the scenario
        target *= 3
        perf = execute(_spec(inputs, runs, target_qps=target))
    assert perf.result is not None and perf.result.valid, perf.result
    acc = execute(_spec(inputs, runs, mode="accuracy"))
    assert perf.status == "ok" and acc.status == "ok"
    return {"inputs": inputs, "runs": runs, "perf": perf.run_dir, "acc": acc.run_dir, "root": root,
            "target_qps": target}


@pytest.mark.slow
def test_open_test_runs_report_exactly_the_duration_problem(resnet_runs: dict, tmp_path: Path):
    out = tmp_path / "submission"
    result = submit(resnet_runs["runs"], out, "MyOrg", "open", "tiny-cpu")
    assert [p.code for p in result.problems] == ["test-duration"]
    assert "not valid for submission" in result.problems[0].message
    scen = out / "open" / "MyOrg" / "results" / "tiny-cpu" / "resnet" / "Offline"
    assert (scen / "accuracy" / "mlperf_log_accuracy.json").stat().st_size <= 10 * 1024
    assert "hash=" in (scen / "accuracy" / "accuracy.txt").read_text()
    assert json.loads((scen / "measurements.json").read_text())["weight_data_types"] == "fp32"
    assert {p.suffix for p in result.summaries.values()} == {".csv", ".json", ".md", ".xlsx"}
    assert verify_archive(result.archive) == []
    # the untruncated accuracy log stays in the run directory
    assert (resnet_runs["acc"] / "mlperf_log_accuracy.json").stat().st_size > 10 * 1024
    assert main(["check", str(out)]) == 1
    # the official checker through `mlharness check --official`'s own code path
    referee.require("tools/submission/submission_checker/main.py")
    official = run_official(out, referee.INFERENCE, "v6.1")
    assert official.returncode == 1
    assert [p.code for p in official.problems] == ["test-duration"]


@pytest.mark.slow
def test_closed_layout_with_compliance(resnet_runs: dict, tmp_path: Path):
    from mlharness.compliance import run_audit

    runs = tmp_path / "runs"  # the audits go into a copy: the module's runs stay as they were
    shutil.copytree(resnet_runs["runs"], runs)
    base = _spec(resnet_runs["inputs"], runs, target_qps=resnet_runs["target_qps"])
    for test in ("TEST01", "TEST04"):
        run_audit(test, base, runs / "compliance" / test)
    out = tmp_path / "closed"
    result = submit(runs, out, "MyOrg", "closed", "tiny-cpu")
    scen = out / "closed" / "MyOrg" / "results" / "tiny-cpu" / "resnet" / "Offline"
    assert result.layout.entries[0].tests == ["TEST01", "TEST04"]
    for name in ("TEST01/verify_accuracy.txt", "TEST01/verify_performance.txt",
                 "TEST01/accuracy/mlperf_log_accuracy.json", "TEST01/performance/run_1/mlperf_log_detail.txt",
                 "TEST04/verify_performance.txt", "TEST04/performance/run_1/mlperf_log_summary.txt"):
        assert (scen / name).is_file(), name
    assert "TEST PASS" in (scen / "TEST01" / "verify_accuracy.txt").read_text()
    assert "hash=" in (scen / "TEST01" / "accuracy" / "accuracy.txt").read_text()
    codes = {p.code for p in result.problems}
    # what test-length runs of a random model cannot meet in closed; no missing compliance files
    # (an audit faster than its short target is INVALID and fails its band: load-dependent)
    assert codes <= {"test-duration", "offline-samples-per-query", "scenarios-missing",
                     "accuracy-below-target", "compliance-failed", "result-invalid"}
    assert {"test-duration", "scenarios-missing", "accuracy-below-target"} <= codes


def test_demo_runs_are_refused_with_a_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    runs = tmp_path / "runs"
    for scenario, target in (("Offline", {"target_qps": 2000}),
                             ("SingleStream", {"target_latency": 0.05})):
        record = execute(RunSpec(benchmark="demo", scenario=scenario, output_dir=runs, valid=False,
                                 **target))
        assert record.status == "ok"
    with pytest.raises(ConfigError, match="not an MLPerf benchmark") as err:
        submit(runs, tmp_path / "out", "MyOrg", "open", "box")
    assert err.value.message.count("not an MLPerf benchmark") == 1  # said once, not per scenario
    assert "Practising with synthetic data" in err.value.hint
    capsys.readouterr()
    assert main(["submit", "--submitter", "MyOrg", "--division", "open", "--system", "box",
                 "--runs", str(runs), "--output", str(tmp_path / "out2")]) == 2
    assert "run performance and accuracy tests first" not in capsys.readouterr().err


def test_check_explains_an_empty_root(tmp_path: Path):
    problems = check_tree(tmp_path, rules.load())
    assert [p.code for p in problems] == ["tree-empty"]
    assert "mlharness submit" in problems[0].fix
