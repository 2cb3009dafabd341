"""deepseek-r1 exact match (gpqa, mmlu_pro, aime) equals language/deepseek-r1/eval_accuracy.py:
its answer parsers on tricky outputs, and its whole log scoring on a synthetic data set."""

from __future__ import annotations

import json

import llm_fixtures as fx
import pytest
import referee

from mlharness.errors import DatasetError
from mlharness.llm import exact_match as em

transformers = fx.import_transformers()
SCRIPT = "language/deepseek-r1/eval_accuracy.py"

OUTPUTS = [
    "Thinking... ANSWER: (b)", "FINAL ANSWER: C.", "the answer is D", "['ANSWER: A']",
    "first\\nANSWER: B\\nthen ANSWER: C", "Answer: E", "ANSWER: Dx", "answer=a", "",
    "\\boxed{ 42 }", "so \\boxed{7} and later \\boxed{8}", "Answer: 12.5", "Answer: 1000",
    "answer: 33\nmore", "ANSWER: J and then K", "B", "The final answer is (C)",
]
#: rows of a deepseek-r1-style data set: (data set, ground truth, model output)
ROWS = [
    ("gpqa", "B", "Reasoning. ANSWER: B"), ("gpqa", "A", "ANSWER: (c)"),
    ("mmlu_pro_law", "J", "I pick J"), ("mmlu_pro", "E", "FINAL ANSWER: E"),
    ("aime2024", 42, "so the answer is 42 Answer: 42"), ("aime", "7", "Answer: 8"),
    ("gpqa_diamond", None, "ANSWER: A"), ("aime", 5, "no idea"),
]


def _referee_json(code: str, *args: str) -> object:
    referee.require(SCRIPT, python=True)
    proc = referee.python("-c", code, str(referee.INFERENCE / SCRIPT), *args)
    return json.loads(proc.stdout.strip().splitlines()[-1])


IMPORT = ("import sys, json, importlib.util; sys.path.insert(0, sys.argv[1].rsplit('/', 1)[0]); "
          "spec = importlib.util.spec_from_file_location('ev', sys.argv[1]); "
          "ev = importlib.util.module_from_spec(spec); spec.loader.exec_module(ev); ")


@referee.official(SCRIPT, python=True)
def test_parsers_equal_the_official_ones(tmp_path):
    src = tmp_path / "outputs.json"
    src.write_text(json.dumps(OUTPUTS))
    official = _referee_json(
        IMPORT + "t = json.load(open(sys.argv[2])); print(json.dumps("
        "[[ev.parse_multiple_choice(x, 'D'), ev.parse_multiple_choice(x, 'J'), "
        "ev.parse_aime_answer(x)] for x in t]))", str(src))
    ours = [[em.choice_answer(x, "D"), em.choice_answer(x, "J"), em.aime_answer(x)]
            for x in OUTPUTS]
    assert ours == official
    assert any(a is not None for row in ours for a in row)  # the cases parse something


@referee.official(SCRIPT, python=True)
def test_log_score_equals_the_official_evaluation(tmp_path):
    texts = [r[2] for r in ROWS]
    tokdir = fx.make_tokenizer(tmp_path / "tok", texts)
    tok = transformers.AutoTokenizer.from_pretrained(str(tokdir), use_fast=False)
    outputs = {i: tok.encode(t, add_special_tokens=False) + [fx.EOS] for i, t in enumerate(texts)}
    log = fx.token_log(tmp_path / "mlperf_log_accuracy.json", dict(reversed(outputs.items())),
                       dtype="int32", repeat=(2,))
    rows = {"dataset": [r[0] for r in ROWS], "gt_output": [r[1] for r in ROWS],
            "text_input": [f"Question {i}" for i in range(len(ROWS))]}
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    pkl = tmp_path / "deepseek.pkl"
    referee.python("-c", "import pandas as pd, json, sys; "
                   "pd.DataFrame(json.load(open(sys.argv[1]))).to_pickle(sys.argv[2])",
                   str(tmp_path / "rows.json"), str(pkl))
    official = _referee_json(
        IMPORT + "df, _ = ev.process_mlperf_log_accuracy(sys.argv[2], sys.argv[3], sys.argv[4], "
        "dtype='int32', output_dir=sys.argv[5]); "
        "print(json.dumps([float(df['prompt_accuracy'].mean()), "
        "float(df['tok_model_output_len'].mean()), len(df)]))",
        str(log), str(pkl), str(tokdir), str(tmp_path / "out"))
    decode = __import__("mlharness.llm.rouge", fromlist=["hf_decoder"]).hf_decoder(tokdir)
    ours = em.score_log(log, rows["gt_output"], rows["dataset"], decode)
    assert [ours.exact_match, ours.tokens_per_sample, ours.samples] == \
        [pytest.approx(official[0], abs=1e-6), pytest.approx(official[1], abs=1e-6), official[2]]
    assert 0 < ours.exact_match < 100
    assert ours.scored == {"gpqa": 3, "mmlu_pro": 2, "aime": 3} and not ours.unscored
    assert "'exact_match': " in ours.accuracy_line()
    from mlharness import rules
    values = rules.load("v6.1").benchmark("deepseek-r1").parse_accuracy(ours.accuracy_line())
    assert values == {"exact_match": pytest.approx(ours.exact_match),
                      "TOKENS_PER_SAMPLE": pytest.approx(ours.tokens_per_sample)}


def test_unscored_kinds_are_reported_not_guessed():
    r = em.score(["ANSWER: A", "\\boxed{2}", "```python\nprint(1)\n```"], ["A", "2", "x"],
                 ["gpqa", "math500", "livecodebench_v5"], [3, 4, 5])
    assert r.exact_match is None and r.partial == 100.0
    assert r.unscored == {"math500": 1, "livecodebench": 1} and r.tokens_per_sample == 4.0
    with pytest.raises(DatasetError, match="2 samples were not scored"):
        r.accuracy_line()
    with pytest.raises(DatasetError, match="no exact-match scorer"):
        em.score(["x"], ["A"], ["trivia"], [1])
