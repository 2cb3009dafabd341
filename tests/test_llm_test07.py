"""TEST07 (gpt-oss-120b accuracy in performance mode) equals compliance/TEST07/
run_verification.py: our GPQA score of the audit log gives the official verdict and summary."""

from __future__ import annotations

import json
import shlex

import llm_fixtures as fx
import pytest
import referee

from mlharness.llm import gpt_oss_accuracy as go
from mlharness.llm import test07
from mlharness.llm.rouge import hf_decoder
from mlharness import rules

transformers = fx.import_transformers()
SCRIPT = "compliance/TEST07/run_verification.py"
EVAL = "language/gpt-oss-120b/eval_mlperf_accuracy.py"
#: a GPQA compliance set: (ground truth, model output); decoded through the tiny WordPiece
#: tokenizer the Harmony markers lose their form, so 2 of 5 are right (40%)
ROWS = [("A", "<|channel|>final<|message|>A"), ("B", "ANSWER: B"), ("C", "FINAL ANSWER: D"),
        ("D", "Answer: d."), ("A", "no idea")]


def _official(tmp_path, run_dir, command: str, threshold: float) -> str:
    out = tmp_path / "out"
    proc = referee.run(SCRIPT, "-c", str(run_dir), "-o", str(out), "--accuracy-script", command,
                       "--accuracy-threshold", str(threshold), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return (out / "TEST07" / "verify_accuracy.txt").read_text()


@referee.official(SCRIPT, EVAL, python=True)
@pytest.mark.parametrize("threshold", [40.0, 60.698])  # pass at the boundary, fail
def test_gpqa_audit_verdict_equals_the_official_script(tmp_path, threshold):
    texts = [r[1] for r in ROWS]
    tokdir = fx.make_tokenizer(tmp_path / "tok", texts)
    tok = transformers.AutoTokenizer.from_pretrained(str(tokdir))
    run_dir = tmp_path / "audit"
    run_dir.mkdir()
    log = fx.token_log(run_dir / "mlperf_log_accuracy.json",
                       {i: tok.encode(t, add_special_tokens=False) for i, t in enumerate(texts)},
                       dtype="int32")
    rows = {"dataset": ["gpqa_diamond"] * len(ROWS), "ground_truth": [r[0] for r in ROWS]}
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    pkl = tmp_path / "acc_eval_compliance_gpqa.pkl"
    referee.python("-c", "import pandas as pd, json, sys; "
                   "pd.DataFrame(json.load(open(sys.argv[1]))).to_pickle(sys.argv[2])",
                   str(tmp_path / "rows.json"), str(pkl))
    command = " ".join(shlex.quote(str(p)) for p in (
        referee.REFEREE_PYTHON, referee.INFERENCE / EVAL, "--mlperf-log")) + \
        " {accuracy_log} --reference-data " + shlex.quote(str(pkl)) + \
        " --tokenizer " + shlex.quote(str(tokdir))
    official = _official(tmp_path, run_dir, command, threshold)
    score = go.score_log(log, rows["ground_truth"], rows["dataset"],
                         hf_decoder(tokdir, use_fast=True, skip_special_tokens=False))
    ours = test07.verify(score.accuracy_line() + "\n", threshold)
    assert ours.score == pytest.approx(40.0) and ours.passed == (threshold <= 40.0)
    assert official.endswith(ours.summary())


@referee.official(SCRIPT, python=True)
@pytest.mark.parametrize("printed", ["'exact_match': 61.000", "no score here"])
def test_whole_file_equals_the_official_one(tmp_path, printed):
    run_dir = tmp_path / "audit"
    run_dir.mkdir()
    (run_dir / "mlperf_log_accuracy.json").write_text("[]")
    threshold = rules.load("v6.1").benchmark("gpt-oss-120b").test07_accuracy_threshold
    official = _official(tmp_path, run_dir, f"echo {shlex.quote(printed)}", threshold)
    ours = test07.verify(printed + "\n", threshold)
    assert ours.verify_accuracy_txt() == official
    assert ours.passed == printed.startswith("'exact")
