"""The endpoints result format as a second result format: its facts equal the v6.1 checker's
constants, our reader equals the checker's endpoints parser, and ``submit --format endpoints``
lays real llama3.1-8b runs (tests/llm_submission_support.py) out so that our checker and the
pinned checker report the same: exactly what test-length runs of a 24-sample fixture cannot
reach, nothing once the duration is raised in the copies (and the dataset size waived by the
checker's own flag), with equal summaries; each endpoints rule broken once, both name it."""

from __future__ import annotations

import csv
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

import referee
from endpoints_tree_support import (edit_json, full_length, official_check, official_parse)
from llm_submission_support import BENCHMARK, SYSTEM_TOML, make_runs
from mlharness.rules import endpoints
from mlharness.rules import load as load_rules
from mlharness.submission import check_tree, submit

ROUND = load_rules("v6.1")
FACTS = endpoints.load()
SCENARIOS = ("Interactive", "Offline")


@referee.official("tools/submission/submission_checker/constants.py")
def test_facts_equal_the_checker_constants() -> None:
    sys.path.insert(0, str(referee.INFERENCE / "tools" / "submission"))
    try:
        from submission_checker import constants as c  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    assert list(FACTS.allowed_models) == c.ENDPOINTS_ALLOWED_MODELS
    assert FACTS.result_fields == c.RESULT_FIELD_ENDPOINTS["v6.1"]
    assert FACTS.mappings == {k.strip(): v for k, v in c.ENDPOINTS_MAPPINGS.items()}
    assert FACTS.yaml_fields == c.ENDPOINTS_YAML_FIELD_MAP
    assert FACTS.json_alt_paths == c.ENDPOINTS_JSON_ALT_PATHS
    assert FACTS.inferred == c.ENDPOINTS_INFERRED_FIELDS
    assert FACTS.audits == c.ENDPOINTS_COMPLIANCE_MAPPING
    with pytest.raises(Exception, match="no endpoints result format"):
        endpoints.load("v6.0")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("endpoints-llama")
    made = make_runs(root)
    (root / "system.toml").write_text(SYSTEM_TOML)
    return {**made, "system_toml": root / "system.toml"}


def _submit(runs: dict[str, Path], out: Path, division: str = "closed", fmt: str = "endpoints"):
    return submit(runs["runs"], out, "Org", division, "box", system_toml=runs["system_toml"],
                  result_format=fmt)


def _scen(tree: Path, division: str, scenario: str) -> Path:
    return tree / division / "Org" / "results" / "box" / BENCHMARK / scenario


@pytest.mark.slow
def test_layout_and_our_checker(runs: dict[str, Path], tmp_path: Path) -> None:
    result = _submit(runs, tmp_path / "closed")
    tree = result.layout.root
    assert {e.format for e in result.layout.entries} == {"endpoints"}
    for scen in SCENARIOS:
        d = _scen(tree, "closed", scen)
        assert endpoints.is_endpoints_dir(d)
        files = sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()
                       and "loadgen" not in p.parts)
        assert files == ["README.md", "accuracy/accuracy_results.json", "config.yaml",
                         "measurements.json", "performance/result_summary.json"]
        assert not (d / "user.conf").exists()  # kept under loadgen/, not required here
    # what a 24-sample test-length fixture cannot reach; TEST06 is optional in this format
    assert sorted((p.code, p.where.split("/")[-1]) for p in result.problems) == sorted(
        (code, s) for s in SCENARIOS for code in ("test-duration", "accuracy-coverage"))
    assert any("TEST06" in n and "optional" in n for n in result.layout.notes)
    # auto keeps llama3.1-8b in LoadGen's format (its reference's)
    auto = _submit(runs, tmp_path / "auto", fmt="auto")
    assert {e.format for e in auto.layout.entries} == {"loadgen"}


@pytest.mark.slow
def test_the_checker_reads_and_judges_the_same(runs: dict[str, Path], tmp_path: Path) -> None:
    result = _submit(runs, tmp_path / "closed")
    tree = result.layout.root
    for scen in SCENARIOS:  # our reader: the official parser's values, key for key
        d = _scen(tree, "closed", scen)
        official = official_parse(d)
        for kind in ("performance", "accuracy"):
            ours = endpoints.read(d, kind, FACTS).values
            if kind == "accuracy":
                ours["accuracy_score"] = endpoints.read(d, kind, FACTS).scores[0]
            assert {k: ours[k] for k in official[kind]} == official[kind], (scen, kind)
            assert set(official[kind]) == set(ours)
    checked = official_check(tree)
    assert Counter(p.code for p in checked.problems) == Counter(
        p.code for p in result.problems) == Counter({"test-duration": 2, "accuracy-coverage": 2})
    # full length (in the copies) and the dataset size waived: accepted, and the summaries agree
    full_length(tree)
    official_csv = tmp_path / "official.csv"
    accepted = official_check(tree, "--skip-dataset-size-check", csv=official_csv)
    assert accepted.summary_ok and not accepted.problems, accepted.output[-3000:]
    assert [p.code for p in check_tree(tree, ROUND)] == ["accuracy-coverage"] * 2
    again = _submit(runs, tmp_path / "open", "open")  # the summary's rows come from the tree
    full_length(again.layout.root)
    from mlharness.submission import summary
    ours = summary.rows(again.layout, ROUND)
    theirs = list(csv.DictReader(official_csv.open()))
    assert len(ours) == len(theirs) == 2
    for mine, row in zip(sorted(ours, key=lambda r: r["Scenario"]),
                         sorted(theirs, key=lambda r: r["Scenario"])):
        for column in ("Scenario", "Result", "Accuracy", "Units", "inferred", "Location"):
            value = mine[column]
            expected = row[column].replace("closed/", "open/")
            if isinstance(value, float):
                assert value == pytest.approx(float(expected)), column
            elif column == "Location":  # the checker's is under its --input path
                assert expected.endswith("/" + str(value)), column
            else:
                assert str(value) == expected, column


BROKEN = {
    "seeds": ("Interactive", "config.yaml", None, "wrong-seeds"),
    "ttft": ("Interactive", "performance/result_summary.json",
             {"ttft.early_stopping_percentiles.99.0": 900_000_000}, "token-latency"),
    "failed": ("Offline", "performance/result_summary.json", {"n_samples_failed": 3},
               "endpoints-failed-samples"),
    "score": ("Offline", "accuracy/accuracy_results.json",
              {"accuracy_scores": [{"dataset_type": "accuracy", "total_samples": 24}]},
              "accuracy-missing"),
    "audit": ("Offline", "audit/audit_consistency_output_test.json",
              {"test": "consistency_output_test", "passed": False}, "compliance-failed"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_each_endpoints_rule(runs: dict[str, Path], tmp_path: Path, name: str) -> None:
    result = _submit(runs, tmp_path / "closed")
    tree = result.layout.root
    full_length(tree)
    scen, rel, change, code = BROKEN[name]
    path = _scen(tree, "closed", scen) / rel
    if name == "seeds":
        path.write_text(path.read_text().replace("scheduler_random_seed: 16159082839903944936",
                                                 "scheduler_random_seed: 42"))
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            path.write_text("{}")
        edit_json(path, change)
    ours = [p.code for p in check_tree(tree, ROUND) if p.code != "accuracy-coverage"]
    assert ours == [code]
    official = official_check(tree, "--skip-dataset-size-check")
    codes = [p.code for p in official.problems]
    if name == "failed":  # the checker counts them as LoadGen errors, reported only with
        assert codes == []  # --submission-exceptions: a quirk our checker does not share
        return
    expected = {"ttft": "token-latency", "seeds": "wrong-seeds", "score": "accuracy-missing",
                "audit": "compliance-files"}[name]
    assert expected in codes, official.output[-3000:]


def test_the_format_is_refused_for_a_round_without_it(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="unknown result format"):
        submit(tmp_path, tmp_path / "out", "Org", "open", "box", result_format="json")
    data = json.loads(json.dumps({"a": {"99.9": 1, "50": 2}}))
    assert endpoints._nested(data, "a.99.9") == 1 and endpoints._nested(data, "a.50.0") == 2
