"""The llama benchmarks' ROUGE equals the official scripts' on a synthetic CNN/DailyMail-style
set, scored through a real (tiny) tokenizer from a LoadGen token accuracy log."""

from __future__ import annotations

import json
import re
from pathlib import Path

import llm_fixtures as fx
import pytest
import referee

from mlharness.errors import DatasetError
from mlharness.llm import rouge, sentences

transformers = fx.import_transformers()
HERE = Path(__file__).resolve().parent
LLAMA31 = "language/llama3.1-8b/evaluation.py"
LLAMA2 = "language/llama2-70b/evaluate-accuracy.py"
N = 16


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("llm")
    case = fx.summary_case(tmp, N)
    refs, preds, tokdir, encode, dataset = (case[k] for k in ("refs", "preds", "tokdir",
                                                              "encode", "dataset"))
    outputs = {i: encode(p) + [fx.EOS] for i, p in enumerate(preds)}
    outputs = dict(reversed(list(outputs.items())))  # LoadGen logs in completion order
    log = fx.token_log(tmp / "mlperf_log_accuracy.json", outputs, dtype="int64", repeat=(5,))
    entries = json.loads(log.read_text())
    entries[-1]["data"] = entries[0]["data"]  # a repeated sample: only its first entry counts
    log.write_text(json.dumps(entries))
    nltk_data = tmp / "nltk_data"
    sentences.write_punkt_tab(nltk_data)
    return {"tmp": tmp, "refs": refs, "preds": preds, "tokdir": tokdir, "dataset": dataset,
            "log": log, "nltk_data": nltk_data}


def _official(case, monkeypatch, script: str, *args: str) -> str:
    referee.require(script, python=True)
    monkeypatch.setenv("NLTK_DATA", str(case["nltk_data"]))
    probe = referee.python("-c", "import nltk, rouge_score, pandas", check=False)
    if probe.returncode != 0:
        referee.require("the referee's nltk, rouge_score, pandas (make referee)")
    proc = referee.python(str(HERE / "llm_referee_run.py"), str(referee.INFERENCE / script),
                          *args, cwd=case["tmp"])
    return proc.stdout.strip().splitlines()[-1]


def _value(line: str, key: str) -> float:
    m = re.search(rf"'{key}': (?:np\.\w+\()?'?([\d.]+)", line)
    assert m, (key, line)
    return float(m.group(1))


def test_llama31_equals_the_official_evaluation(case, monkeypatch):
    ours = rouge.score_log(case["log"], case["refs"], rouge.hf_decoder(case["tokdir"]),
                           dtype="int64")
    assert ours.gen_num == N and 0 < ours.rouge1 < 100 and ours.rougeLsum > 0
    line = _official(case, monkeypatch, LLAMA31, "--mlperf-accuracy-file", str(case["log"]),
                     "--dataset-file", str(case["dataset"]), "--model-name",
                     str(case["tokdir"]), "--total-sample-count", str(N), "--dtype", "int64")
    for key in rouge.ROUGE_TYPES:
        assert getattr(ours, key) == pytest.approx(_value(line, key), abs=1e-6), key
    assert ours.gen_len == _value(line, "gen_len")
    assert ours.gen_num == _value(line, "gen_num")
    # our accuracy.txt line reads back through the checker's patterns (rules/v6.1.toml)
    from mlharness import rules
    parsed = rules.load("v6.1").benchmark("llama3.1-8b").parse_accuracy(ours.accuracy_line())
    assert parsed == {k: pytest.approx(v) for k, v in ours.metrics().items()}


def test_llama2_equals_the_official_evaluation(case, monkeypatch, tmp_path):
    log32 = fx.token_log(tmp_path / "acc.json", {
        i: case_tokens for i, case_tokens in enumerate(_ids32(case))}, dtype="int32")
    pkl = tmp_path / "open_orca.pkl"
    referee.python("-c", "import pandas as pd, json, sys; "
                   "pd.DataFrame({'output': json.load(open(sys.argv[1]))}).to_pickle(sys.argv[2])",
                   str(_write(tmp_path / "refs.json", case["refs"])), str(pkl))
    ours = rouge.score_log(log32, case["refs"], rouge.hf_decoder(case["tokdir"]), dtype="int32",
                           count_tokens=True)
    line = _official(case, monkeypatch, LLAMA2, "--checkpoint-path", str(case["tokdir"]),
                     "--mlperf-accuracy-file", str(log32), "--dataset-file", str(pkl),
                     "--dtype", "int32")
    for key in rouge.ROUGE_TYPES:
        assert getattr(ours, key) == pytest.approx(_value(line, key), abs=1e-6), key
    assert ours.gen_len == _value(line, "gen_len")
    assert ours.gen_tok_len == _value(line, "gen_tok_len")
    assert ours.tokens_per_sample == _value(line, "tokens_per_sample")
    parsed = __import__("mlharness.rules", fromlist=["load"]).load("v6.1") \
        .benchmark("llama2-70b-99.9").parse_accuracy(ours.accuracy_line())
    assert parsed["TOKENS_PER_SAMPLE"] == ours.tokens_per_sample


def _ids32(case) -> list[list[int]]:
    tok = transformers.AutoTokenizer.from_pretrained(str(case["tokdir"]), use_fast=False)
    return [tok.encode(p, add_special_tokens=False) + [fx.EOS] for p in case["preds"]]


def _write(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj))
    return path


def test_sentences_equal_nltk_reading_the_same_model(case, monkeypatch):
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(case["nltk_data"])])
    nltk.tokenize._get_punkt_tokenizer.cache_clear()
    text = " ".join(a for a, _ in fx.articles(30, seed=3))
    assert sentences.sent_tokenize(text) == nltk.sent_tokenize(text)
    assert sentences.sent_tokenize("Mr. Smith arrived at 3 p.m. on Friday. He left.") == [
        "Mr. Smith arrived at 3 p.m. on Friday.", "He left."]


def test_text_scoring_and_bad_inputs(case, tmp_path):
    perfect = rouge.score_texts(case["refs"], case["refs"])
    assert (perfect.rouge1, perfect.rougeLsum) == (100.0, 100.0)
    with pytest.raises(DatasetError, match="2 predictions for 1 references"):
        rouge.score_texts(["a", "b"], ["a"])
    bad = fx.token_log(tmp_path / "bad.json", {N + 4: [1, 2]})
    with pytest.raises(DatasetError, match="outside the dataset"):
        rouge.score_log(bad, case["refs"], lambda b: ["x"] * len(b))
    (tmp_path / "trunc.json").write_text('[{"seq_id": 0, "qsl_idx": 0, "da\n\n...\n\nhash=ab')
    with pytest.raises(DatasetError, match="not JSON"):
        rouge.score_log(tmp_path / "trunc.json", case["refs"], lambda b: [])
    (tmp_path / "odd.json").write_text('[{"seq_id": 0, "qsl_idx": 0, "data": "ABC"}]')
    with pytest.raises(DatasetError, match="not int64 hex"):
        rouge.score_log(tmp_path / "odd.json", case["refs"], lambda b: [])
