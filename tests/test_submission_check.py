"""Our checker, rule by rule: lay a real (demo-model) run pair out as a resnet result, then break
one thing at a time and expect exactly that rule's problem to appear."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest

from mlharness import rules
from mlharness.runner import execute
from mlharness.spec import RunSpec
from mlharness.submission.check import check_tree
from mlharness.submission.layout import lay_out
from mlharness.submission.runs import scan
from mlharness.submission.system import describe

BASE = rules.load("v6.1")
# the demo's runs stand in for resnet runs here (real LoadGen logs, small and fast)
RULES = dataclasses.replace(BASE, benchmarks={
    "resnet": BASE.benchmarks["resnet"].model_copy(update={"harness": "demo"})})


@pytest.fixture(scope="module")
def good_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("check")
    runs = root / "runs"
    for mode in ("performance", "accuracy"):
        # SingleStream: a test run lasts its 2 s whatever the machine's speed, so it stays VALID
        # (a tiny latency hint, so LoadGen never runs out of queries on a fast machine)
        perf = {"target_latency": 0.005} if mode == "performance" else {}
        rec = execute(RunSpec(benchmark="demo", scenario="SingleStream", mode=mode, valid=False,
                              output_dir=runs, **perf))
        assert rec.status == "ok"
    desc, _ = describe("box")
    out = root / "tree"
    lay_out(scan(runs), RULES, out, "open", "Org", "box", desc)
    return out


@pytest.fixture
def tree(good_tree: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "tree"
    shutil.copytree(good_tree, dst)
    return dst


def scen(root: Path, division: str = "open") -> Path:
    return root / division / "Org" / "results" / "box" / "resnet" / "SingleStream"


def codes(root: Path) -> set[str]:
    return {p.code for p in check_tree(root, RULES)}


def baseline(good_tree: Path) -> set[str]:
    # a test-length demo run: short, and the demo set is smaller than ImageNet's
    return codes(good_tree)


def test_baseline_is_duration_and_dataset_only(good_tree: Path):
    assert baseline(good_tree) <= {"test-duration", "accuracy-coverage", "performance-sample-count"}
    assert "test-duration" in baseline(good_tree)


def _edit_log(path: Path, key: str, value: str) -> None:
    text = path.read_text()
    text = re.sub(rf'("key": "{re.escape(key)}", "value": )[^,]+,', rf"\g<1>{value},", text)
    path.write_text(text)


@pytest.mark.parametrize("mutate, code", [
    (lambda s: _edit_log(s / "performance/run_1/mlperf_log_detail.txt", "effective_qsl_rng_seed", "7"),
     "wrong-seeds"),
    (lambda s: _edit_log(s / "performance/run_1/mlperf_log_detail.txt", "result_validity", '"INVALID"'),
     "result-invalid"),
    (lambda s: (s / "performance/run_1/mlperf_log_detail.txt").unlink(), "log-missing"),
    (lambda s: (s / "performance/run_1/mlperf_log_detail.txt").write_text("hello\n"), "log-malformed"),
    (lambda s: (s / "accuracy/accuracy.txt").write_text("accuracy=1.0%\n"), "accuracy-hash"),
    (lambda s: (s / "accuracy/accuracy.txt").write_text("hash=abc\n"), "accuracy-unreadable"),
    (lambda s: (s / "accuracy/mlperf_log_accuracy.json").write_text("x" * 20000), "accuracy-not-truncated"),
    (lambda s: (s / "accuracy/mlperf_log_summary.txt").unlink(), "accuracy-files"),
    (lambda s: (s / "user.conf").write_text(""), "measurements-file"),
    (lambda s: (s / "README.md").unlink(), "measurements-file"),
    (lambda s: (s / "measurements.json").write_text(json.dumps({"retraining": "No"})),
     "measurements-field"),
    (lambda s: (s / "measurements.json").unlink(), "measurements-missing"),
])
def test_each_rule(tree: Path, good_tree: Path, mutate, code: str):
    assert code not in baseline(good_tree)
    mutate(scen(tree))
    assert code in codes(tree)


def test_system_and_src_rules(tree: Path):
    base = tree / "open" / "Org"
    desc = json.loads((base / "systems" / "box.json").read_text())
    desc["cooling"] = ""
    desc["submitter"] = "Other"
    (base / "systems" / "box.json").write_text(json.dumps(desc))
    shutil.rmtree(base / "src")
    found = codes(tree)
    assert {"system-field-empty", "system-submitter", "src-missing"} <= found
    (base / "systems" / "box.json").unlink()
    assert "system-json-missing" in codes(tree)


def test_closed_rules(tree: Path):
    shutil.move(tree / "open", tree / "closed")
    desc_path = tree / "closed" / "Org" / "systems" / "box.json"
    desc = json.loads(desc_path.read_text())
    desc["division"] = "closed"
    desc_path.write_text(json.dumps(desc))
    assert {"scenarios-missing", "compliance-missing"} <= codes(tree)
    sc = scen(tree, "closed")
    (sc / "accuracy" / "accuracy.txt").write_text("accuracy=50.000%, good=1, total=2\nhash=ab\n")
    log = sc / "performance/run_1/mlperf_log_detail.txt"
    _edit_log(log, "effective_scenario", '"Offline"')
    _edit_log(log, "effective_samples_per_query", "100")
    assert {"accuracy-below-target", "offline-samples-per-query"} <= codes(tree)
    desc["system_type"] = "datacenter"
    desc_path.write_text(json.dumps(desc))
    assert "system-type-unsupported" in codes(tree)


def test_unknown_and_retired_benchmarks(tree: Path):
    results = tree / "open" / "Org" / "results" / "box"
    shutil.copytree(results / "resnet", results / "retinanet")
    shutil.move(results / "resnet", results / "mobilenet")
    problems = [p for p in check_tree(tree, RULES) if p.code == "benchmark-unknown"]
    assert sorted(p.message for p in problems) == ["mobilenet is not a v6.1 benchmark",
                                                   "retinanet is retired in v6.1"]
    (tree / "open" / "Org" / "model_mapping.json").write_text(json.dumps({"mobilenet": "resnet"}))
    problems = [p for p in check_tree(tree, RULES) if p.code == "benchmark-unknown"]
    assert [p.message for p in problems] == ["retinanet is retired in v6.1"]


def test_retired_test_and_old_layout(tree: Path):
    (scen(tree) / "TEST05").mkdir()
    assert "compliance-retired" in codes(tree)
    assert [p.code for p in check_tree(tree, rules.load("v5.1"))] == ["layout-unsupported"]
