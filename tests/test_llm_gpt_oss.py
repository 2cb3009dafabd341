"""gpt-oss-120b exact match (aime, gpqa, mmlu) equals language/gpt-oss-120b: its Harmony-aware
parsers on tricky outputs, and eval_mlperf_accuracy.py's weighted score of a whole log."""

from __future__ import annotations

import json
import re

import llm_fixtures as fx
import pytest
import referee

from mlharness.errors import DatasetError
from mlharness.llm import gpt_oss_accuracy as go
from mlharness.llm.exact_match import aime_answer
from mlharness.llm.rouge import hf_decoder

transformers = fx.import_transformers()
DIR = "language/gpt-oss-120b"
SCRIPT = f"{DIR}/eval_mlperf_accuracy.py"

OUTPUTS = [
    "<|channel|>analysis<|message|>maybe A<|end|><|channel|>final<|message|>**C**<|return|>",
    "<|channel|>final 明<|message|>Answer: b.", "<|channel|>final<|message|>(D) because",
    "thinking... FINAL ANSWER: B", "The answer is E, not F", "['ANSWER: A']",
    "<|channel|>final<|message|>The result is \\boxed{ 17 }", "Answer: 1000", "", "1. J",
    "<|channel|>final<|message|>I think it is G.<|return|>", "ANSWER: Dx then ANSWER: (a)",
]
#: (data set, ground truth, model output)
ROWS = [
    ("aime25", "42", "so Answer: 42"), ("aime25", 7, "Answer: 8"),
    ("gpqa_diamond", "B", "FINAL ANSWER: B"), ("gpqa_diamond", "A", "ANSWER: (c)"),
    ("mmlu", "J", "I pick J"), ("gpqa_diamond", None, "ANSWER: A"),
]


@referee.official(f"{DIR}/eval_accuracy.py", python=True)
def test_parsers_equal_the_official_ones(tmp_path):
    src = tmp_path / "outputs.json"
    src.write_text(json.dumps(OUTPUTS))
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); import eval_accuracy as ev; "
            "t = json.load(open(sys.argv[2])); print(json.dumps([[ev.parse_multiple_choice(x, "
            "'D'), ev.parse_multiple_choice(x, 'J'), ev.parse_aime_answer(x)] for x in t]))")
    proc = referee.python("-c", code, str(referee.INFERENCE / DIR), str(src))
    official = json.loads(proc.stdout.strip().splitlines()[-1])
    ours = [[go.choice_answer(x, "D"), go.choice_answer(x, "J"), aime_answer(x)]
            for x in OUTPUTS]
    assert ours == official
    assert go.final_channel(OUTPUTS[0]) == "**C**"


@referee.official(SCRIPT, python=True)
def test_log_score_equals_eval_mlperf_accuracy(tmp_path):
    texts = [r[2] for r in ROWS]
    tokdir = fx.make_tokenizer(tmp_path / "tok", texts)
    tok = transformers.AutoTokenizer.from_pretrained(str(tokdir))
    outputs = {i: tok.encode(t, add_special_tokens=False) for i, t in enumerate(texts)}
    # every entry counts here, a repeated sample too
    log = fx.token_log(tmp_path / "mlperf_log_accuracy.json", outputs, dtype="int32",
                       repeat=(2, 4))
    rows = {"dataset": [r[0] for r in ROWS], "ground_truth": [r[1] for r in ROWS]}
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    pkl = tmp_path / "gpt_oss.pkl"
    referee.python("-c", "import pandas as pd, json, sys; "
                   "pd.DataFrame(json.load(open(sys.argv[1]))).to_pickle(sys.argv[2])",
                   str(tmp_path / "rows.json"), str(pkl))
    out = tmp_path / "result.json"
    proc = referee.run(SCRIPT, "--mlperf-log", str(log), "--reference-data", str(pkl),
                       "--tokenizer", str(tokdir), "--output-file", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(out.read_text())["summary"]
    decode = hf_decoder(tokdir, use_fast=True, skip_special_tokens=False)
    ours = go.score_log(log, rows["ground_truth"], rows["dataset"], decode)
    assert ours.exact_match == pytest.approx(summary["final_score_percentage"], abs=1e-9)
    assert {k: (ours.correct[k], ours.total[k]) for k in ours.total} == {
        k: (v["correct"], v["total"]) for k, v in summary["per_dataset"].items()}
    assert 0 < ours.exact_match < 100 and sum(ours.total.values()) == len(ROWS) + 2
    printed = re.search(r"'exact_match': [\d.]+", proc.stdout)
    assert printed and ours.accuracy_line() == printed.group(0)
    from mlharness import rules
    parsed = rules.load("v6.1").benchmark("gpt-oss-120b").parse_accuracy(ours.accuracy_line())
    assert parsed == {"exact_match": pytest.approx(round(ours.exact_match, 3))}


def test_unscored_entries_and_unknown_sets():
    r = go.score(["Answer: 3", "```python\nx\n```"], ["3", "t"], ["AIME25", "livecodebench_v6"])
    assert r.exact_match is None and r.unscored == {"livecodebench_v6": 1}
    assert r.total == {"aime25": 1} and r.correct == {"aime25": 1}
    with pytest.raises(DatasetError, match="1 entries were not scored"):
        r.accuracy_line()
    with pytest.raises(DatasetError, match="no gpt-oss-120b scorer"):
        go.score(["x"], ["A"], ["trivia"])
    weighted = go.score(["Answer: 1", "Answer: 2", "ANSWER: A"], ["1", "9", "A"],
                        ["aime25", "aime25", "gpqa_diamond"])
    assert weighted.exact_match == pytest.approx((1 / 8 + 1 / 5) / (2 / 8 + 1 / 5) * 100)
