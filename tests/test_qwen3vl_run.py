"""qwen3-vl-235b-a22b end to end: real runs through LoadGen with ``--backend openai`` against
the scripted chat server (tests/qwen3vl_support.py), every scenario VALID with the round's
bounds; the requests on the wire equal the official client's; the accuracy equals the official
evaluation.py on the run's own accuracy log; ``submit`` lays it out in the endpoints format
(its reference's) and both checkers report the same, in that format and in LoadGen's."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest

import endpoints_referee
import synthetic_catalogue as sc
from endpoints_tree_support import full_length, official_check
from mlharness.llm import product_request as pr
from mlharness.llm.product_catalogue import Catalogue
from mlharness.rules import endpoints
from mlharness.rules import load as load_rules
from mlharness.submission import check_tree, submit, summary
from qwen3vl_support import BENCHMARK, SCENARIOS, SYSTEM_TOML, make_runs

ROUND = load_rules("v6.1")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("qwen3vl-runs")
    made = make_runs(root)
    (root / "system.toml").write_text(SYSTEM_TOML)
    return {**made, "system_toml": root / "system.toml"}


@pytest.fixture(scope="module")
def official(runs: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The official code on the runs, in one process of the endpoints referee's Python: the
    client's request of every sample (from the catalogue prepared in its ``datasets`` cache)
    and the qwen3-vl scorer's accuracy.txt of each scenario's accuracy log."""
    home = tmp_path_factory.mktemp("qwen3vl-official")
    cache = home / "hf" / "datasets"
    args = ["cache", str(runs["catalogue"]), "Shopify/product-catalogue", str(cache),
            "+", "requests", str(cache), str(home / "requests.json")]
    for scenario in SCENARIOS:
        args += ["+", "score", str(runs[f"{scenario}-accuracy"] / "mlperf_log_accuracy.json"),
                 str(runs["catalogue"]), str(home / f"score-{scenario}.json")]
    endpoints_referee.run(*args, home=home)
    return {"requests": json.loads((home / "requests.json").read_text()),
            **{s: json.loads((home / f"score-{s}.json").read_text())["accuracy_txt"]
               for s in SCENARIOS}}


def _record(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def _values(run_dir: Path) -> dict:
    from mlharness.loadgen.mllog import parse_detail_log

    return parse_detail_log(run_dir / "mlperf_log_detail.txt").values


@pytest.mark.slow
def test_every_scenario_valid_under_the_rounds_bounds(runs: dict) -> None:
    for scenario in SCENARIOS:
        record = _record(runs[f"{scenario}-performance"])
        assert record["status"] == "ok" and record["result"]["valid"], (scenario, record["result"])
        values = _values(runs[f"{scenario}-performance"])
        assert not values.get("requested_use_token_latencies")  # logged only when on
        assert "result_first_token_99.00_percentile_latency_ns" not in values
        assert values["effective_sample_concatenate_permutation"] is True  # equal-issue mode
    assert _values(runs["Server-performance"])["effective_target_latency_ns"] == 12_000_000_000
    interactive = _values(runs["Interactive-performance"])
    assert interactive["effective_target_latency_ns"] == 1_500_000_000  # the rules' bound
    assert interactive["effective_performance_sample_count"] == 8000  # the 8k set
    conf = (runs["Interactive-performance"] / "user.conf").read_text()
    assert "qwen3-vl-235b-a22b.Server.target_latency = 1500" in conf
    record = _record(runs["Interactive-performance"])
    assert record["settings"]["sources"]["target_latency"] == "rules"
    backend = record["backend"]
    assert backend["served_model"] == "Qwen/Qwen3-VL-235B-A22B-Instruct"  # asked of the server
    assert any("GET /v1/models" in note for note in backend["notes"])


@pytest.mark.slow
def test_requests_on_the_wire_are_the_official_clients(runs: dict, official: dict) -> None:
    by_sample = {sc.sample_of(b["messages"]): b for b in official["requests"]}
    seen = runs["seen"]
    assert len({sc.sample_of(b["messages"]) for b in seen}) == len(official["requests"])
    for body in seen:
        theirs = by_sample[sc.sample_of(body["messages"])]
        assert body["messages"] == theirs["messages"]  # prompt, schema and picture bytes
        assert body["model"] == theirs["model"]
        assert body["max_tokens"] == theirs["max_completion_tokens"] == pr.MAX_NEW_TOKENS
        assert not {"temperature", "top_p", "top_k", "min_tokens"} & set(body)  # none, as theirs
        assert not {"temperature", "top_p", "top_k"} & set(theirs)


@pytest.mark.slow
def test_accuracy_equals_the_official_scorer_on_the_runs_log(runs: dict, official: dict) -> None:
    for scenario in SCENARIOS:
        run_dir = runs[f"{scenario}-accuracy"]
        log = json.loads((run_dir / "mlperf_log_accuracy.json").read_text())
        assert sorted(e["qsl_idx"] for e in log) == list(range(len(runs["rows"])))
        for entry in log:  # the logged response is the server's answer text, UTF-8
            i = entry["qsl_idx"]
            assert bytes.fromhex(entry["data"]).decode() == sc.answer(runs["rows"][i], i)
        assert (run_dir / "accuracy.txt").read_text().rstrip("\n") == official[scenario]
    record = _record(runs["Interactive-accuracy"])
    assert record["accuracy"]["metric"] == "F1_HIERARCHICAL" and 0 < record["accuracy"]["value"] < 1


def _same_as_official(official, expected: Counter) -> None:  # type: ignore[no-untyped-def]
    """The checker's errors are ours; an accuracy miss it logs as a WARNING beside the
    coverage ERROR of the same path (its check failed: accuracy not met, once a scenario)."""
    misses = [w for w in official.warnings if "accuracy not met" in w]
    assert len(misses) == expected["accuracy-below-target"], official.output[-3000:]
    assert Counter(p.code for p in official.problems) == expected - Counter(
        {"accuracy-below-target": len(misses)})


def _scen(tree: Path, division: str, scenario: str) -> Path:
    return tree / division / "Org" / "results" / "box" / BENCHMARK / scenario


@pytest.mark.slow
def test_submit_in_the_endpoints_format_both_checkers_agree(runs: dict, tmp_path: Path) -> None:
    closed = submit(runs["runs"], tmp_path / "closed", "Org", "closed", "box",
                    system_toml=runs["system_toml"])  # auto: qwen3-vl's reference format
    tree = closed.layout.root
    assert {e.format for e in closed.layout.entries} == {"endpoints"}
    assert all(endpoints.is_endpoints_dir(_scen(tree, "closed", s)) for s in SCENARIOS)
    expected = Counter({"test-duration": 3, "accuracy-coverage": 3, "accuracy-below-target": 3})
    assert Counter(p.code for p in closed.problems) == expected  # the scripted answers miss
    _same_as_official(official_check(tree), expected)
    # open, full length in the copies, the dataset size waived: accepted; equal summaries
    opened = submit(runs["runs"], tmp_path / "open", "Org", "open", "box",
                    system_toml=runs["system_toml"])
    full_length(opened.layout.root)
    out = tmp_path / "official.csv"
    accepted = official_check(opened.layout.root, "--skip-dataset-size-check", csv=out)
    assert accepted.summary_ok and not accepted.problems, accepted.output[-3000:]
    assert [p.code for p in check_tree(opened.layout.root, ROUND)] == ["accuracy-coverage"] * 3
    ours = sorted(summary.rows(opened.layout, ROUND), key=lambda r: r["Scenario"])
    theirs = sorted(csv.DictReader(out.open()), key=lambda r: r["Scenario"])
    assert [r["Scenario"] for r in ours] == [r["Scenario"] for r in theirs] == sorted(SCENARIOS)
    for mine, row in zip(ours, theirs):
        assert float(mine["Result"]) == pytest.approx(float(row["Result"]))
        for column in ("Accuracy", "Units", "inferred"):
            assert str(mine[column]) == row[column], column


@pytest.mark.slow
def test_loadgen_format_both_checkers_agree(runs: dict, tmp_path: Path) -> None:
    """In LoadGen's format the checker reads Interactive's 8k set as too few performance
    samples (its count is the full set's): both say so, and ours says to use the endpoints
    format."""
    result = submit(runs["runs"], tmp_path / "closed", "Org", "closed", "box",
                    system_toml=runs["system_toml"], result_format="loadgen")
    expected = Counter({"test-duration": 3, "accuracy-coverage": 3, "accuracy-below-target": 3,
                        "performance-sample-count": 1, "offline-samples-per-query": 1})
    assert Counter(p.code for p in result.problems) == expected
    _same_as_official(official_check(result.layout.root), expected)
    psc = next(p for p in result.problems if p.code == "performance-sample-count")
    assert psc.where.endswith("Interactive") and "--format auto" in psc.fix


def test_the_catalogue_of_the_runs_is_the_reference_order(tmp_path: Path) -> None:
    rows = sc.write(tmp_path)
    cat = Catalogue(tmp_path)
    assert [p.title for p in cat.products] == [r.title for r in rows]


@pytest.mark.slow
def test_runs_compare_and_report_read_both_formats(runs: dict, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from catalogue_support import run_cli
    from mlharness.report.sources import read_source

    trees = {fmt: submit(runs["runs"], tmp_path / fmt, "Org", "closed", "box",
                         system_toml=runs["system_toml"], result_format=fmt).layout.root
             for fmt in ("endpoints", "loadgen")}
    ours = {e.scenario: e for e in read_source(trees["endpoints"]).entries}
    theirs = {e.scenario: e for e in read_source(trees["loadgen"]).entries}
    assert sorted(ours) == sorted(theirs) == sorted(SCENARIOS)
    for scenario, entry in ours.items():  # the same runs, read from either format
        assert entry.value == pytest.approx(theirs[scenario].value, rel=1e-6), scenario
        assert entry.valid is True and theirs[scenario].valid is True
        assert entry.accuracy_ok is False and theirs[scenario].accuracy_ok is False
        assert entry.benchmark == BENCHMARK
    listed = run_cli(["runs", "--runs-dir", trees["endpoints"], "--json"], capsys)
    assert listed.code == 0, listed.err
    rows = json.loads(listed.out)
    assert sorted((r["scenario"], r["mode"]) for r in rows) == sorted(
        (s, m) for s in SCENARIOS for m in ("performance", "accuracy"))
    assert {r["verdict"] for r in rows if r["mode"] == "performance"} == {"VALID"}
    assert {r["verdict"] for r in rows if r["mode"] == "accuracy"} == {"FAIL"}
    compared = run_cli(["compare", trees["endpoints"], trees["loadgen"]], capsys)
    assert compared.code == 0 and "Qwen3-VL-235B-A22B Interactive (Queries/s)" in compared.out
    page = tmp_path / "report.html"
    made = run_cli(["report", trees["endpoints"], "--output", page], capsys)
    assert made.code == 0, made.err
    assert "(endpoints format)" in page.read_text()
