"""The LLM audits end to end: ``mlharness compliance`` runs TEST06 (llama3.1-8b) and TEST07 /
TEST09 (gpt-oss-120b) as performance runs with the official audit.config through the real LoadGen
(the scripted streaming backend ``stream_backends:TimedStream`` in the runner's child process),
then verifies them; the official ``run_verification.py`` scripts, unmodified in the referee's
Python, run on the same audit runs and must give the same verdicts, files and copied logs, and the
v6.1 submission checker's compliance check must read our output as it reads theirs.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import llm_fixtures as fx
import pytest
import referee

from mlharness.cli.main import main
from mlharness.compliance import (
    VerificationInputError, audit_config, required_tests, run_audit, run_compliance, spec_of_run,
    verify,
)
from mlharness.compliance.audit_checks import audit_applied
from mlharness.compliance.logs import read_detail
from mlharness.errors import ConfigError
from mlharness.llm import eos
from mlharness.runner import execute
from mlharness.spec import RunSpec

transformers = fx.import_transformers()  # before anything imports it (no torch: fast)
HERE = Path(__file__).resolve().parent
STREAM = "stream_backends:TimedStream"
FAST = {"ttft_s": 0.01, "gap_s": 0.0005}
SCRIPT = {t: f"compliance/{t}/run_verification.py" for t in ("TEST06", "TEST07", "TEST09")}
EVAL = "language/gpt-oss-120b/eval_mlperf_accuracy.py"
CHECKER = "tools/submission/submission_checker"
VERDICT = {"TEST06": "verify_accuracy.txt", "TEST07": "verify_accuracy.txt",
           "TEST09": "verify_output_len.txt"}


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def compliance(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict]]:
    """``mlharness compliance ... --json`` in this process; its exit code and verdicts."""
    code = main(["compliance", "--no-progress", "--json", *args])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else []


def official(test: str, audit: Path, work: Path, *extra: str) -> subprocess.CompletedProcess:
    """The official run_verification.py on the audit run directory, output in ``work/out``."""
    work.mkdir(parents=True, exist_ok=True)
    proc = referee.run(SCRIPT[test], "-c", str(audit), "-o", str(work / "out"), *extra, cwd=work)
    assert (work / "out" / test / VERDICT[test]).is_file(), proc.stdout[-2000:] + proc.stderr
    return proc


def assert_same_files(test: str, ours: Path, theirs: Path, audit: Path) -> None:
    """The same files in the same places; the copied logs byte for byte the audit's."""
    assert tree(ours / test) == tree(theirs / test)
    for name in tree(ours / test) - {VERDICT[test]}:
        source = audit / Path(name).name
        assert (ours / test / name).read_bytes() == source.read_bytes() \
            == (theirs / test / name).read_bytes()


def checker(scenario_dir: Path, benchmark: str, scenario: str) -> dict[str, Any]:
    """The v6.1 submission checker's ComplianceCheck on a scenario directory."""
    proc = referee.python(str(HERE / "llm_checker_compliance.py"),
                          str(referee.INFERENCE / "tools" / "submission"), str(scenario_dir),
                          benchmark, scenario)
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---- the audit.config files and the required tests ------------------------------------------

def _official_lines(rel: str) -> list[str]:
    text = (referee.INFERENCE / "compliance" / rel).read_text()
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.strip().startswith("#")]


@referee.official("compliance/TEST06", "compliance/TEST07", "compliance/TEST09")
@pytest.mark.parametrize(("test", "model", "rel"), [
    ("TEST06", "llama3_1-8b", "TEST06/audit.config"),
    ("TEST06", "deepseek-r1", "TEST06/audit.config"),
    ("TEST07", "gpt-oss-120b", "TEST07/gpt-oss-120b/audit.config"),
    ("TEST09", "gpt-oss-120b", "TEST09/gpt-oss-120b/audit.config"),
])
def test_audit_configs_are_the_official_files(test, model, rel):
    """Every line of the official file, in its order (thresholds included)."""
    ours = [line for line in audit_config(test, model).render().splitlines()
            if not line.startswith("#")]
    assert ours == _official_lines(rel)


def test_audit_configs_only_for_their_benchmarks():
    with pytest.raises(ConfigError, match="LLM benchmarks, not 'resnet50'"):
        audit_config("TEST06", "resnet50")
    with pytest.raises(ConfigError, match="no official TEST07 audit.config for llama3.1-8b"):
        audit_config("TEST07", "llama3_1-8b")
    # TEST06 is one file for every LLM: the interactive model key finds its benchmark too
    assert audit_config("TEST06", "llama3_1-8b-interactive").entries == \
        audit_config("TEST06", "llama3_1-8b").entries


@referee.official(f"{CHECKER}/constants.py")
def test_required_tests_equal_the_checker_lists():
    import sys

    sys.path.insert(0, str(referee.INFERENCE / "tools" / "submission"))
    try:
        from submission_checker.constants import MODEL_CONFIG
    finally:
        sys.path.remove(str(referee.INFERENCE / "tools" / "submission"))
    config = MODEL_CONFIG["v6.1"]
    for name in ("llama3.1-8b", "llama3.1-8b-edge", "llama2-70b-99.9", "deepseek-r1",
                 "gpt-oss-120b"):
        expected = [t for t in ("TEST06", "TEST07", "TEST09") if name in config[f"models_{t}"]]
        assert required_tests(name, "v6.1") == expected, name
    assert required_tests("gpt-oss-120b", "v6.1") == ["TEST07", "TEST09"]
    assert required_tests("llama3.1-8b", division="open") == []


def test_eos_token_id_from_tokenizer_files(tmp_path):
    def tok(name: str, files: dict[str, object]) -> Path:
        d = tmp_path / name
        d.mkdir()
        for fname, data in files.items():
            (d / fname).write_text(data if isinstance(data, str) else json.dumps(data))
        return d

    llama3 = tok("llama3", {"tokenizer.json": {"added_tokens": []}, "tokenizer_config.json": {
        "eos_token": "<|eot_id|>", "added_tokens_decoder": {
            "128000": {"content": "<|begin_of_text|>"}, "128009": {"content": "<|eot_id|>"}}}})
    assert eos.eos_token_id(llama3) == 128009
    llama2 = tok("llama2", {"tokenizer_config.json": {"eos_token": {"content": "</s>"}},
                            "tokenizer.json": {"added_tokens": [{"id": 2, "content": "</s>"}]}})
    assert eos.eos_token_id(llama2) == 2
    bpe = tok("bpe", {"tokenizer_config.json": {"eos_token": "<end>"},
                      "vocab.json": {"<end>": 7, "a": 8}})
    assert eos.eos_token_id(bpe) == 7
    vocab = tok("vocab", {"tokenizer_config.json": {"eos_token": "[SEP]"},
                          "vocab.txt": "[PAD]\n[UNK]\n[CLS]\n[SEP]\n"})
    assert eos.eos_token_id(vocab) == 3
    assert eos.eos_token_id(tok("none", {"tokenizer_config.json": {}})) is None
    with pytest.raises(ConfigError, match="in none of the tokenizer's vocabularies"):
        eos.eos_token_id(tok("lost", {"tokenizer_config.json": {"eos_token": "<end>"}}))


# ---- TEST06: llama3.1-8b in Offline, Server and Interactive ---------------------------------

@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A CNN/DailyMail-style data set, a tokenizer whose EOS is [SEP] (id 3), and a performance
    run per scenario: the audited SUT's own runs."""
    root = tmp_path_factory.mktemp("llama")
    pairs = fx.articles(12)
    tokdir = fx.make_tokenizer(root / "tok", [a for a, _ in pairs] + ["Summarize:"])
    config = json.loads((tokdir / "tokenizer_config.json").read_text())
    (tokdir / "tokenizer_config.json").write_text(json.dumps({**config, "eos_token": "[SEP]"}))
    tok = transformers.AutoTokenizer.from_pretrained(str(tokdir))
    dataset = fx.write_cnn_dataset(root / "cnn_eval.json", pairs,
                                   lambda s: tok.encode(s, add_special_tokens=False))
    runs = {}
    for scenario in ("Offline", "Server", "Interactive"):
        record = execute(RunSpec(benchmark="llama3.1-8b", scenario=scenario, backend=STREAM,
                                 dataset=dataset, backend_option=FAST, target_qps=400,
                                 output_dir=root / "runs"))
        assert record.status == "ok", record.record.error
        runs[scenario] = record.run_dir
    return {"root": root, "tokenizer": tokdir, "runs": runs}


CASES06 = {  # scenario, backend options of the audit (on top of the reference's), passes
    "offline": ("Offline", {}, True),
    "offline-two-eos": ("Offline", {"eos": 2}, False),
    "server": ("Server", {}, True),
    "server-first-token": ("Server", {"bad_first": 1}, False),
    "interactive-one-eos": ("Interactive", {"eos": 2, "eos_repeat": 1}, True),
    "interactive-two-eos": ("Interactive", {"eos": 2}, False),
}


@referee.official(SCRIPT["TEST06"], CHECKER, python=True)
@pytest.mark.parametrize("case", list(CASES06))
def test_test06_audit_equals_the_official_script(llama, case, tmp_path, capsys):
    scenario, options, passes = CASES06[case]
    out = tmp_path / "results" / scenario
    flags = [f for k, v in options.items() for f in ("--backend-option", f"{k}={v}")]
    if case != "offline":  # without --audit: the tests llama3.1-8b needs (TEST06)
        flags += ["--audit", "TEST06"]
    code, verdicts = compliance(capsys, "--reference-perf", str(llama["runs"][scenario]),
                                "--output", str(out), *flags)
    [verdict] = verdicts
    assert (code, verdict["test"], verdict["passed"]) == (0 if passes else 1, "TEST06", passes)
    audit = Path(verdict["audit_run"])
    assert audit.parent == llama["root"] / "runs" / "compliance" / "TEST06" / "llama3.1-8b"
    assert audit.name.startswith(f"{scenario}-TEST06-")
    facts = read_detail(audit / "mlperf_log_detail.txt")
    assert audit_applied("TEST06", facts) and not audit_applied("TEST01", facts)
    checks = {c["name"]: c["passed"] for c in verdict["checks"]}
    assert checks["first token"] is (None if scenario == "Offline" else "bad_first" not in options)
    assert checks["EOS"] is (options.get("eos_repeat", 2) < 2 if "eos" in options else True)
    assert "EOS token id 2: the official default: no tokenizer given" in verdict["notes"]
    # the official script on the same audit run (its default --eos_token_id, 2)
    proc = official("TEST06", audit, tmp_path / "official", "-s", scenario)
    assert proc.returncode == 0, proc.stderr[-2000:]
    theirs = (tmp_path / "official" / "out" / "TEST06" / "verify_accuracy.txt").read_text()
    assert (out / "TEST06" / "verify_accuracy.txt").read_text() == theirs
    assert_same_files("TEST06", out, tmp_path / "official" / "out", audit)
    assert tree(out / "TEST06") == {"verify_accuracy.txt", "accuracy/mlperf_log_accuracy.json"}
    # the v6.1 submission checker reads our directory as it reads the official one
    ours_checked = checker(out, "llama3.1-8b", scenario)
    assert ours_checked["tests"] == ["TEST06"] and ours_checked["passed"] is passes
    assert checker(tmp_path / "official" / "out", "llama3.1-8b", scenario)["passed"] is passes


@referee.official(SCRIPT["TEST06"], python=True)
def test_test06_counts_the_tokenizers_eos(llama, tmp_path, capsys):
    """With the run's tokenizer (eos_token [SEP] = 3) TEST06 counts id 3: two of them fail, as
    the official eos_check does when given the id as an integer; on the command line the official
    script compares `-e 3` as a string and passes whatever the output."""
    ref = llama["runs"]["Offline"]
    out = tmp_path / "tokenizer"
    code, [verdict] = compliance(capsys, "--audit", "TEST06", "--reference-perf", str(ref),
                                 "--output", str(out), "--task-option",
                                 f"tokenizer={llama['tokenizer']}", "--backend-option", "eos=3")
    assert code == 1 and not verdict["passed"]
    [eos_check] = [c for c in verdict["checks"] if c["name"] == "EOS"]
    assert eos_check["passed"] is False and "ends in 2 EOS tokens (3)" in eos_check["detail"]
    assert any(n.startswith("EOS token id 3: the eos_token of the tokenizer") for n in
               verdict["notes"])
    audit = Path(verdict["audit_run"])
    log = audit / "mlperf_log_accuracy.json"
    code = ("import sys, json, numpy as np; sys.path.insert(0, sys.argv[1]); "
            "from run_verification import eos_check; "
            "print(eos_check(json.load(open(sys.argv[2])), np.int32, int(sys.argv[3])))")
    folder = str(referee.INFERENCE / "compliance" / "TEST06")
    for token, expected in ((3, "False"), (2, "True")):
        proc = referee.python("-c", code, folder, str(log), str(token))
        assert proc.stdout.strip().splitlines()[-1] == expected
    proc = official("TEST06", audit, tmp_path / "quirk", "-s", "Offline", "-e", "3")
    assert "EOS check pass: True" in proc.stdout  # the string never equals a token id
    # --eos-token-id overrides the tokenizer: verifying the same audit with 2 is the official text
    code, [again] = compliance(capsys, "--audit", "TEST06", "--audit-run", str(audit),
                               "--reference-perf", str(ref), "--output", str(tmp_path / "two"),
                               "--eos-token-id", "2")
    assert code == 0 and again["passed"]
    official("TEST06", audit, tmp_path / "default", "-s", "Offline")
    assert (tmp_path / "two" / "TEST06" / "verify_accuracy.txt").read_text() == \
        (tmp_path / "default" / "out" / "TEST06" / "verify_accuracy.txt").read_text()


def test_llm_verification_refuses_the_wrong_runs(llama, tmp_path):
    ref = llama["runs"]["Offline"]
    audit = run_audit("TEST06", spec_of_run(ref), tmp_path / "audits").run_dir
    for test in ("TEST07", "TEST09", "TEST01"):
        with pytest.raises(VerificationInputError, match=f"not run with the {test} audit"):
            verify(test, ref, ref, audit, tmp_path / test)
    with pytest.raises(VerificationInputError, match="is a TEST06 audit run"):
        verify("TEST06", audit, None, audit, tmp_path / "ref-is-audit")
    with pytest.raises(VerificationInputError, match="not run with the TEST06 audit"):
        verify("TEST06", None, None, ref, tmp_path / "plain")
    assert verify("TEST06", None, None, audit, tmp_path / "alone").passed  # no reference needed
    with pytest.raises(VerificationInputError, match="already holds a verification"):
        verify("TEST06", None, None, audit, tmp_path / "alone")
    assert verify("TEST06", None, None, audit, tmp_path / "alone", overwrite=True).passed
    # logs made by another harness (no run.json): LoadGen's scenario, the official EOS id
    bare = tmp_path / "bare"
    shutil.copytree(audit, bare, ignore=shutil.ignore_patterns("run.json"))
    again = verify("TEST06", None, None, bare, tmp_path / "bare-out")
    assert again.passed and again.scenario == "Offline"
    assert (tmp_path / "bare-out" / "TEST06" / "verify_accuracy.txt").read_text() == \
        (tmp_path / "alone" / "TEST06" / "verify_accuracy.txt").read_text()


# ---- TEST07 and TEST09: gpt-oss-120b ----------------------------------------------------------

@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A tokenizer whose ids 5..8 are A..D, a performance set and two GPQA compliance sets (80%
    and 20% of the answers "A", which every output "A B" gives), and a performance run in
    Offline and Server whose outputs are ids 5, 6 ("A B")."""
    pd = pytest.importorskip("pandas")  # the llm extra: here, not when the module is collected
    root = tmp_path_factory.mktemp("gpt-oss")
    tokdir = fx.make_tokenizer(root / "tok", ["A B C D question"])
    assert transformers.AutoTokenizer.from_pretrained(str(tokdir)).encode(
        "A B", add_special_tokens=False) == [5, 6]
    perf = root / "perf_eval_ref.pkl"
    pd.DataFrame({"tok_input": [[9, 9, 9]] * 20, "dataset": ["aime25"] * 20,
                  "ground_truth": ["1"] * 20}).to_pickle(perf)
    sets = {}
    for name, truths in (("pass", "AAAAB"), ("fail", "ABBBB")):
        # pickled by the referee's pandas, which the official script reads it with (ours, with
        # pyarrow, would pickle strings the referee cannot load)
        rows = root / f"{name}.json"
        rows.write_text(json.dumps({"tok_input": [[9, 9]] * 5, "dataset": ["gpqa_diamond"] * 5,
                                    "ground_truth": list(truths)}))
        sets[name] = root / f"acc_eval_compliance_gpqa_{name}.pkl"
        referee.python("-c", "import pandas as pd, json, sys; "
                       "pd.DataFrame(json.load(open(sys.argv[1]))).to_pickle(sys.argv[2])",
                       str(rows), str(sets[name]))
    runs = {}
    for scenario in ("Offline", "Server"):
        record = execute(RunSpec(
            benchmark="gpt-oss-120b", scenario=scenario, backend=STREAM, dataset=perf,
            backend_option={**FAST, "n_tokens": 2, "first_id": 5}, target_qps=400,
            task_option={"tokenizer": str(tokdir)}, output_dir=root / "runs"))
        assert record.status == "ok", record.record.error
        runs[scenario] = record.run_dir
    return {"root": root, "tokenizer": tokdir, "sets": sets, "runs": runs}


@referee.official(SCRIPT["TEST07"], EVAL, CHECKER, python=True)
@pytest.mark.parametrize(("scenario", "compliance_set", "passes"),
                         [("Offline", "pass", True), ("Server", "fail", False)])
def test_test07_audit_equals_the_official_script(gpt_oss, scenario, compliance_set, passes,
                                                 tmp_path, capsys):
    out = tmp_path / "results" / scenario
    gpqa = gpt_oss["sets"][compliance_set]
    code, [verdict] = compliance(capsys, "--audit", "TEST07", "--reference-perf",
                                 str(gpt_oss["runs"][scenario]), "--output", str(out),
                                 "--test07-dataset", str(gpqa))
    assert (code, verdict["passed"]) == (0 if passes else 1, passes)
    audit = Path(verdict["audit_run"])
    spec = json.loads((audit / "run.json").read_text())["spec"]
    assert Path(spec["dataset"]) == gpqa and spec["performance_sample_count"] == 5
    entries = json.loads((audit / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == list(range(5))  # each sample once
    ours = (out / "TEST07" / "verify_accuracy.txt").read_text()
    assert ours.startswith(f"'exact_match': {80.0 if passes else 20.0:.3f}\n")
    assert "the official compliance set has 990" in " ".join(verdict["notes"])
    # the official script, running the official eval_mlperf_accuracy.py on the audit's log
    command = " ".join(shlex.quote(str(p)) for p in (
        referee.REFEREE_PYTHON, referee.INFERENCE / EVAL, "--mlperf-log")) + \
        " {accuracy_log} --reference-data " + shlex.quote(str(gpqa)) + \
        " --tokenizer " + shlex.quote(str(gpt_oss["tokenizer"]))
    official("TEST07", audit, tmp_path / "official", "--accuracy-script", command,
             "--audit-config", str(audit / "audit.config"))
    theirs = (tmp_path / "official" / "out" / "TEST07" / "verify_accuracy.txt").read_text()
    summary = ours[ours.index("\n" + "=" * 80):]
    assert theirs.endswith(summary)  # the same score, threshold and verdict
    assert ("TEST PASS" in theirs) is passes
    assert_same_files("TEST07", out, tmp_path / "official" / "out", audit)
    # TEST09 is missing here: the checker says so for both, and about TEST07 only when it failed
    ours_checked = checker(out, "gpt-oss-120b", scenario)
    assert ours_checked == checker(tmp_path / "official" / "out", "gpt-oss-120b", scenario)
    assert ours_checked["tests"][:2] == ["TEST07", "TEST09"] and not ours_checked["passed"]
    assert any("TEST07" in e for e in ours_checked["errors"]) is not passes


@referee.official(SCRIPT["TEST09"], CHECKER, python=True)
@pytest.mark.parametrize(("scenario", "n_tokens", "passes"),
                         [("Offline", 1278, True), ("Server", 2, False), ("Offline", 1500, False)])
def test_test09_audit_equals_the_official_script(gpt_oss, scenario, n_tokens, passes, tmp_path,
                                                 capsys):
    out = tmp_path / "results" / scenario
    code, [verdict] = compliance(capsys, "--audit", "TEST09", "--reference-perf",
                                 str(gpt_oss["runs"][scenario]), "--output", str(out),
                                 "--backend-option", f"n_tokens={n_tokens}")
    assert (code, verdict["passed"]) == (0 if passes else 1, passes)
    audit = Path(verdict["audit_run"])
    assert len(json.loads((audit / "mlperf_log_accuracy.json").read_text())) == 20
    proc = official("TEST09", audit, tmp_path / "official", "--audit-config",
                    str(audit / "audit.config"))
    assert proc.returncode == (0 if passes else 1)
    theirs = (tmp_path / "official" / "out" / "TEST09" / "verify_output_len.txt").read_text()
    assert (out / "TEST09" / "verify_output_len.txt").read_text() == theirs
    assert f"Mean output tokens: {n_tokens:.2f}" in theirs
    assert_same_files("TEST09", out, tmp_path / "official" / "out", audit)
    # TEST07 is missing here: the checker says so for both, and nothing else about TEST09
    ours_checked = checker(out, "gpt-oss-120b", scenario)
    assert ours_checked == checker(tmp_path / "official" / "out", "gpt-oss-120b", scenario)
    assert any("TEST09" in e for e in ours_checked["errors"]) is not passes


def test_test07_needs_its_compliance_set(gpt_oss, tmp_path, capsys):
    code = main(["compliance", "--audit", "TEST07", "--reference-perf",
                 str(gpt_oss["runs"]["Offline"]), "--output", str(tmp_path), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "TEST07 runs on the GPQA compliance set" in err
    assert "--test07-dataset" in err and not any(tmp_path.iterdir())
    with pytest.raises(ConfigError, match="GPQA compliance set"):  # the API asks for it too
        run_compliance("TEST07", gpt_oss["runs"]["Offline"], None, tmp_path / "out")
