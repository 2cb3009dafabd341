"""LLM results in a submission: real llama3.1-8b runs (Offline and Interactive, performance and
accuracy, through LoadGen with a scripted streaming backend answering each prompt with its
reference summary: tests/llm_submission_support.py) laid out by ``submit`` and judged by our
checker and by the pinned v6.1 checker (in the referee's Python).

Both report exactly what test-length runs of a 24-sample fixture cannot meet: the 600 s
duration, the 13368-sample accuracy set, GEN_LEN (a sum over all 13368 outputs) and, in closed,
the TEST06 audit (missing in the first tree: the checker's messages about it are asserted word
for word; ``submit --run-audits`` then runs it and both checkers are satisfied). Every other rule the checker applies to an LLM result passes, and
each LLM rule is then broken once to see both checkers name it.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

import referee
from llm_submission_support import BENCHMARK, SYSTEM_TOML, make_runs
from mlharness import rules
from mlharness.cli.main import main
from mlharness.llm import test06
from mlharness.submission import SubmitResult, check_tree, submit
from mlharness.submission.official import OfficialResult, run_official
from mlharness.submission.pack import verify_archive

ROUND = rules.load("v6.1")
LLAMA = rules.load("v6.1").benchmark(BENCHMARK)
SCENARIOS = ("Interactive", "Offline")
CHECKER = "tools/submission/submission_checker/main.py"


# ---- the round's facts as the submission code sees them (no runs) ----------------------------

def test_the_round_sees_its_llm_benchmarks():
    assert ROUND.find("llama3.1-8b") is LLAMA
    assert ROUND.find("resnet50") is ROUND.benchmarks["resnet"]
    assert ROUND.find("llama2-70b-99") is None  # the v6.1 checker omits it
    assert ROUND.find_kept("llama2-70b-99") is not None  # kept to read older results
    assert rules.load("v6.0").find("llama3.1-8b") is None  # no LLM rules there
    assert LLAMA.harness == "llama3.1-8b"
    assert LLAMA.offline_min_samples_per_query == LLAMA.dataset_size == 13368
    assert LLAMA.result_field("Interactive") == LLAMA.result_field("Server") == \
        "result_completed_tokens_per_second"


@pytest.mark.parametrize("present, missing, unknown", [
    (["Offline", "Interactive"], [], []),
    (["Offline", "Server"], [], []),
    (["Offline"], ["(one of) Interactive or Server"], []),
    (["Interactive"], ["Offline"], []),
    (["Offline", "Server", "SingleStream"], [], ["SingleStream"]),
])
def test_scenarios_as_the_checker_requires_them(present, missing, unknown):
    assert LLAMA.scenario_problems("datacenter", present) == (missing, unknown)
    assert LLAMA.scenario_problems("edge", present) is None  # the checker would crash
    edge = rules.load("v6.1").benchmark("llama3.1-8b-edge")
    assert edge.scenario_problems("edge", ["Offline"]) == (["SingleStream"], [])


# ---- real runs, laid out ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def llm_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("llm-runs")
    runs = make_runs(root)
    (root / "system.toml").write_text(SYSTEM_TOML)
    return {**runs, "system_toml": root / "system.toml"}


def _submit(llm_runs: dict[str, Path], out: Path, division: str) -> SubmitResult:
    return submit(llm_runs["runs"], out, "Org", division, "box",
                  system_toml=llm_runs["system_toml"])


@pytest.fixture(scope="module")
def closed(llm_runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> SubmitResult:
    return _submit(llm_runs, tmp_path_factory.mktemp("llm-closed") / "submission", "closed")


def _bench_dir(root: Path, division: str = "closed") -> Path:
    return root / division / "Org" / "results" / "box" / BENCHMARK


def _gen_len(tree: Path, division: str = "closed") -> str:
    text = (_bench_dir(tree, division) / "Offline" / "accuracy" / "accuracy.txt").read_text()
    found = re.search(LLAMA.accuracy_regex["GEN_LEN"], text.splitlines()[0])
    assert found
    return found.group(1)


def _ours(problems) -> list[tuple[str, str]]:
    """(code, scenario directory) of each problem, sorted."""
    out = []
    for p in problems:
        tail = p.where.split(f"/{BENCHMARK}", 1)[1] if f"/{BENCHMARK}" in p.where else ""
        out.append((p.code, tail.strip("/").split("/")[0]))
    return sorted(out)


@pytest.mark.slow
def test_closed_layout(llm_runs: dict[str, Path], closed: SubmitResult):
    bench = _bench_dir(closed.layout.root)
    assert sorted(p.name for p in bench.iterdir()) == ["Interactive", "Offline"]
    for scen in SCENARIOS:
        d = bench / scen
        for name in ("performance/run_1/mlperf_log_summary.txt",
                     "performance/run_1/mlperf_log_detail.txt", "accuracy/mlperf_log_summary.txt",
                     "accuracy/mlperf_log_detail.txt", "accuracy/mlperf_log_accuracy.json",
                     "accuracy/accuracy.txt", "measurements.json", "user.conf", "README.md"):
            assert (d / name).is_file(), (scen, name)
        acc = (d / "accuracy" / "accuracy.txt").read_text()
        assert LLAMA.parse_accuracy(acc)["ROUGE1"] == 100.0  # the line the checker reads
        assert re.search(r"^hash=[0-9a-f]{64}$", acc, re.MULTILINE)
        # the Interactive result is the run made under the interactive model key
        assert "llama3_1-8b-interactive.Server.target_qps" in (d / "user.conf").read_text() \
            or scen == "Offline"
        assert not (d / "TEST06").exists()
    assert any("no TEST06 verification" in n for n in closed.layout.notes)
    assert verify_archive(closed.archive) == []
    # the summary: tokens/s, the run's own number, every accuracy metric the checker reads
    rows = {r["Scenario"]: r for r in json.loads(closed.summaries["json"].read_text())}
    assert set(rows) == set(SCENARIOS)
    for scen in SCENARIOS:
        run = json.loads((llm_runs[f"{scen}-performance"] / "run.json").read_text())["result"]
        assert rows[scen]["Units"] == "Tokens/s"
        assert rows[scen]["Result"] == pytest.approx(run["value"])
        assert rows[scen]["Accuracy"] == ("ROUGE1: 100.0  ROUGE2: 100.0  ROUGEL: 100.0  "
                                          f"ROUGELSUM: 100.0  GEN_LEN: {_gen_len(closed.layout.root)}")


@pytest.mark.slow
def test_our_checker_reports_only_what_the_fixture_cannot_reach(closed: SubmitResult):
    expected = sorted((code, scen) for scen in SCENARIOS for code in (
        "test-duration", "accuracy-coverage", "accuracy-below-target", "compliance-missing"))
    assert _ours(closed.problems) == expected
    gen = [p.message for p in closed.problems if p.code == "accuracy-below-target"]
    assert gen == [f"GEN_LEN {_gen_len(closed.layout.root)} below 7.35088e+06 "
                   "(0.9 x 8.16764e+06)"] * 2  # ROUGE passes; the length needs all 13368
    assert all(p.message == "TEST06 is missing" for p in closed.problems
               if p.code == "compliance-missing")
    assert main(["check", str(closed.layout.root)]) == 1


def _official(tree: Path) -> OfficialResult:
    referee.require(CHECKER, python=True)
    return run_official(tree, referee.INFERENCE, "v6.1", python=referee.REFEREE_PYTHON)


_LINE = re.compile(r"^\[[^\]]* (ERROR|WARNING)\] (.*)$")


def _messages(result: OfficialResult, tree: Path, division: str = "closed") -> list[str]:
    """The checker's findings, its benchmark directory's path cut out, minus its wrap-up lines."""
    base = str(_bench_dir(tree.resolve(), division)) + "/"
    out = []
    for line in result.output.splitlines():
        m = _LINE.match(line)
        if not m or m.group(2).startswith(("Some ", "NoResults", "SUMMARY", "Execution of check")):
            continue
        out.append(f"{m.group(1)} {m.group(2).replace(base, '')}")
    return sorted(out)


def _expected_official(gen_len: str, closed: bool = True) -> list[str]:
    out = []
    for s in SCENARIOS:
        out += [
            f"ERROR {s}/performance/run_1/mlperf_log_detail.txt Test duration less than 600s in "
            "user config. expected=600000, found=2000",
            f"WARNING {s}/accuracy/mlperf_log_detail.txt accuracy not met: "
            f"expected=7350879.600000, found={gen_len}",
            f"ERROR {s}/accuracy/mlperf_log_detail.txt accurcy run does not cover all dataset, "
            "accuracy samples: 24, dataset size: 13368",
        ]
        if closed:  # TEST06 is missing: its directory, its file, and the crash of reading it
            out += [f"ERROR Missing TEST06 in compliance dir {s}/",
                    "ERROR Missing accuracy file in compliance dir. Needs file "
                    f"{s}/TEST06/verify_accuracy.txt",
                    f"ERROR Execution occurred in running check {s}/. Running accuracy_check in "
                    "ComplianceCheck"]
    return sorted(out)


@pytest.mark.slow
def test_the_official_checker_reports_the_same(closed: SubmitResult):
    tree = closed.layout.root
    result = _official(tree)
    assert result.returncode == 1
    assert _messages(result, tree) == _expected_official(_gen_len(tree))
    assert Counter(p.code for p in result.problems) == Counter(
        {"test-duration": 2, "accuracy-coverage": 2, "compliance-files": 4,
         "checker-exception": 2})


@pytest.mark.slow
def test_test06_audits_run_by_submit_satisfy_both_checkers(llm_runs: dict[str, Path],
                                                          tmp_path: Path):
    """``submit --run-audits`` runs the TEST06 audit of each scenario (real LoadGen runs with the
    official audit.config), verifies it against the runs laid out, and the official checker then
    reports nothing about TEST06."""
    runs = tmp_path / "runs"
    shutil.copytree(llm_runs["runs"], runs)
    result = submit(runs, tmp_path / "closed", "Org", "closed", "box",
                    system_toml=llm_runs["system_toml"], run_audits=True)
    tree = result.layout.root
    for scen in SCENARIOS:
        verdict = (_bench_dir(tree).parent.parent.parent / "compliance" / "box" / BENCHMARK /
                   scen / "TEST06" / "verify_accuracy.txt")
        if not verdict.is_file():  # v6 keeps compliance beside the results
            verdict = _bench_dir(tree) / scen / "TEST06" / "verify_accuracy.txt"
        text = verdict.read_text()
        assert "EOS check pass: True" in text and "Sample length check pass: True" in text, text
        assert "False" not in text, text
    assert not [p for p in result.problems if "TEST06" in p.message]
    messages = _messages(_official(tree), tree)
    assert not [m for m in messages if "TEST06" in m or "ComplianceCheck" in m], messages
    # the audits are runs of their own, found again by a later submit (no second audit)
    again = submit(runs, tmp_path / "again", "Org", "closed", "box",
                   system_toml=llm_runs["system_toml"], run_audits=True)
    assert not [p for p in again.problems if "TEST06" in p.message]
    assert len(list((runs / "compliance" / "TEST06").rglob("run.json"))) == 2


@pytest.mark.slow
def test_open_division(llm_runs: dict[str, Path], tmp_path: Path):
    result = _submit(llm_runs, tmp_path / "open", "open")
    tree = result.layout.root
    assert _ours(result.problems) == sorted(
        (code, s) for s in SCENARIOS for code in ("test-duration", "accuracy-coverage"))
    assert _messages(_official(tree), tree, "open") == _expected_official(_gen_len(tree, "open"), False)


@pytest.mark.slow
def test_summary_equals_the_official_one(llm_runs: dict[str, Path], tmp_path: Path):
    """With the two things a fixture cannot change waived (the duration written into a copy of
    the logs, the dataset size by the checker's own --skip-dataset-size-check), the checker
    accepts the open tree and its summary.csv rows equal ours."""
    result = _submit(llm_runs, tmp_path / "open", "open")
    tree = result.layout.root
    for scen in SCENARIOS:
        log = _bench_dir(tree, "open") / scen / "performance" / "run_1" / "mlperf_log_detail.txt"
        text = log.read_text()
        log.write_text(re.sub(r'("key": "effective_min_duration_ms", "value": )\d+',
                              r"\g<1>600000", text))
    referee.require(CHECKER, python=True)
    summary = tmp_path / "official.csv"  # run_official keeps its csv in a temporary directory
    proc = subprocess.run([str(referee.REFEREE_PYTHON), "-m", "submission_checker.main",
                           "--input", str(tree.resolve()), "--version", "v6.1", "--csv",
                           str(summary), "--skip-dataset-size-check"],
                          cwd=referee.INFERENCE / "tools" / "submission", capture_output=True,
                          text=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    theirs = {r["Scenario"]: r for r in csv.DictReader(summary.open())}
    ours = {r["Scenario"]: r for r in json.loads(result.summaries["json"].read_text())}
    assert set(theirs) == set(ours) == set(SCENARIOS)
    for scen in SCENARIOS:
        for col in ("Model", "MlperfModel", "Scenario", "Units", "Accuracy", "Division",
                    "SystemType", "weight_data_types"):
            assert str(ours[scen][col]) == theirs[scen][col], (scen, col)
        assert float(theirs[scen]["Result"]) == pytest.approx(ours[scen]["Result"])
    # the checker marks an Interactive result inferred: it compares the log's "Server" with
    # "server" (results.py); ours says what happened, measured in the scenario
    assert (theirs["Interactive"]["inferred"], ours["Interactive"]["inferred"]) == ("1", 0)
    assert (theirs["Offline"]["inferred"], ours["Offline"]["inferred"]) == ("0", 0)


# ---- each LLM rule broken once: our checker and the official one ------------------------------

def _edit_log(path: Path, key: str, value: str) -> None:
    text = path.read_text()
    new = re.sub(rf'("key": "{re.escape(key)}", "value": )[^,]+,', rf"\g<1>{value},", text)
    assert new != text, key
    path.write_text(new)


def _perf(tree: Path, scen: str) -> Path:
    return _bench_dir(tree) / scen / "performance" / "run_1" / "mlperf_log_detail.txt"


def _test06(tree: Path, scen: str, result: test06.Test06Result) -> None:
    """A TEST06 directory holding the official script's verify_accuracy.txt text (all the
    checker reads of TEST06)."""
    d = _bench_dir(tree) / scen / "TEST06"
    d.mkdir()
    (d / "verify_accuracy.txt").write_text(result.verify_accuracy_txt())


PASSED = test06.Test06Result(first_token=True, eos=True, sample_length=True, problems=[])
SKIPPED = test06.Test06Result(first_token=None, eos=True, sample_length=True, problems=[])
FIRST_FAILED = test06.Test06Result(first_token=False, eos=True, sample_length=True, problems=["x"])

#: (what is broken, our codes added, the official checker's codes added, codes gone from both)
MUTATIONS = {
    # TTFT p99 over Interactive's 500 ms but under Server's 2 s: the checker looks the limits up
    # under the log's scenario (Server) and lets it pass; we hold it to Interactive's
    "ttft-over-interactive-limit": (
        lambda t: _edit_log(_perf(t, "Interactive"),
                            "result_first_token_99.00_percentile_latency_ns", "600000000"),
        {"token-latency"}, set(), set()),
    "ttft-over-server-limit": (
        lambda t: _edit_log(_perf(t, "Interactive"),
                            "result_first_token_99.00_percentile_latency_ns", "2500000000"),
        {"token-latency"}, {"token-latency"}, set()),
    "tpot-over-limit": (
        lambda t: _edit_log(_perf(t, "Interactive"),
                            "result_time_per_output_token_99.00_percentile_ns", "150000000"),
        {"token-latency"}, {"token-latency"}, set()),
    "token-latencies-off": (
        lambda t: _edit_log(_perf(t, "Offline"), "requested_use_token_latencies", "false"),
        {"token-latencies-off"}, {"token-latencies-off"}, set()),
    "offline-samples-per-query": (
        lambda t: _edit_log(_perf(t, "Offline"), "effective_samples_per_query", "440"),
        {"offline-samples-per-query"}, {"offline-samples-per-query"}, set()),
    "no-interactive-or-server": (
        lambda t: shutil.rmtree(_bench_dir(t) / "Interactive"),
        {"scenarios-missing"}, {"scenarios-missing"}, set()),
    "test06-passed": (
        lambda t: (_test06(t, "Offline", SKIPPED), _test06(t, "Interactive", PASSED)),
        set(), set(), {"compliance-missing", "compliance-files", "checker-exception"}),
    "test06-first-token-failed": (
        lambda t: (_test06(t, "Offline", SKIPPED), _test06(t, "Interactive", FIRST_FAILED)),
        {"compliance-failed"}, {"compliance-failed"},
        {"compliance-missing", "compliance-files", "checker-exception"}),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MUTATIONS))
def test_each_llm_rule(closed: SubmitResult, tmp_path: Path, name: str):
    mutate, ours_added, theirs_added, gone = MUTATIONS[name]
    tree = tmp_path / "tree"
    shutil.copytree(closed.layout.root, tree)
    ours_before = {p.code for p in check_tree(tree, ROUND)}
    theirs_before = {p.code for p in _official(tree).problems}
    mutate(tree)
    ours_after = {p.code for p in check_tree(tree, ROUND)}
    theirs_after = {p.code for p in _official(tree).problems}
    assert ours_after - ours_before == ours_added
    assert theirs_after - theirs_before == theirs_added
    assert gone <= (ours_before | theirs_before)
    assert not gone & (ours_after | theirs_after)


@pytest.mark.slow
def test_accuracy_rules_of_our_checker(closed: SubmitResult, tmp_path: Path):
    tree = tmp_path / "tree"
    shutil.copytree(closed.layout.root, tree)
    acc = _bench_dir(tree) / "Offline" / "accuracy" / "accuracy.txt"
    first, rest = acc.read_text().split("\n", 1)
    acc.write_text(re.sub(r"'gen_len': \d+", "'gen_len': 9000000", first) + "\n" + rest)
    found = [p for p in check_tree(tree, ROUND) if p.code == "accuracy-below-target"
             and p.where.endswith("/Offline")]
    assert [p.message for p in found] == ["GEN_LEN 9e+06 above 8.98441e+06 (1.1 x 8.16764e+06)"]
    acc.write_text(first.replace("'rouge1'", "'r1'") + "\n" + rest)
    found = [p for p in check_tree(tree, ROUND) if p.where.endswith("/Offline")
             and p.code.startswith("accuracy-") and p.code != "accuracy-coverage"]
    assert [(p.code, p.message) for p in found] == [("accuracy-unreadable",
                                                     "accuracy.txt has no ROUGE1")]


@pytest.mark.slow
def test_an_unknown_scenario_and_audits_submit_cannot_run(llm_runs: dict[str, Path],
                                                          closed: SubmitResult, tmp_path: Path):
    tree = tmp_path / "tree"
    shutil.copytree(closed.layout.root, tree)
    shutil.copytree(_bench_dir(tree) / "Offline", _bench_dir(tree) / "SingleStream")
    found = [p for p in check_tree(tree, ROUND) if p.code == "scenarios-unknown"]
    assert [p.message for p in found] == ["scenarios the suite does not have: SingleStream"]
