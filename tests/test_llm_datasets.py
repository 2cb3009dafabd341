"""LLM dataset readers: the reference formats read as typed samples (llama3.1-8b's equal to what
the official dataset.py loads), and clear errors for a wrong file."""

from __future__ import annotations

import importlib.util
import json
import pickle
from pathlib import Path

import llm_fixtures as fx
import numpy as np
import pytest
import referee

from mlharness.errors import ConfigError, DatasetError
from mlharness.llm import datasets

HERE = Path(__file__).resolve().parent
pd = pytest.importorskip("pandas")


def _cnn(tmp_path: Path) -> Path:
    pairs = fx.articles(5)
    return fx.write_cnn_dataset(tmp_path / "cnn_eval.json", pairs,
                                lambda text: [len(w) for w in text.split()])


def test_cnn_dailymail_json(tmp_path):
    path = _cnn(tmp_path)
    ds = datasets.read("llama3.1-8b", path)
    raw = json.loads(path.read_text())
    assert len(ds.samples) == 5 and ds.benchmark == "llama3.1-8b"
    assert [s.input_ids for s in ds.samples] == [r["tok_input"] for r in raw]
    assert ds.references() == [r["output"] for r in raw]
    edge = datasets.read("llama3.1-8b-edge", path).samples[0]
    assert edge.prompt == f"Summarize: {raw[0]['input']}"  # the text tok_input encodes
    assert edge.messages == [{"role": "user", "content": edge.prompt}]


@referee.official("language/llama3.1-8b/dataset.py", python=True)
def test_cnn_reader_equals_the_official_dataset_py(tmp_path):
    path = _cnn(tmp_path)
    code = ("import json, sys; from dataset import Dataset; "
            "d = Dataset(dataset_path=sys.argv[1], total_sample_count=13368); "
            "print(json.dumps([d.input_ids, d.targets, d.input_lens]))")
    proc = referee.python(str(HERE / "llm_referee_run.py"), "-c",
                          f"import sys; sys.path.insert(0, {str(referee.INFERENCE / 'language' / 'llama3.1-8b')!r}); "
                          + code, str(path), cwd=tmp_path)
    ids, targets, lens = json.loads(proc.stdout.strip().splitlines()[-1])
    ds = datasets.read("llama3.1-8b", path)
    assert [s.input_ids for s in ds.samples] == ids and ds.references() == targets
    assert [len(s.input_ids or []) for s in ds.samples] == lens


def test_pickled_frames(tmp_path):
    orca = tmp_path / "open_orca.pkl"
    pd.DataFrame({"input": ["q1", "q2"], "tok_input": [np.array([1, 2]), np.array([3])],
                  "output": ["a1", "a2"]}).to_pickle(orca)
    ds = datasets.read("llama2-70b-99.9", orca)
    assert [s.input_ids for s in ds.samples] == [[1, 2], [3]] and ds.references() == ["a1", "a2"]

    ds_r1 = tmp_path / "deepseek.pkl"
    pd.DataFrame({"text_input": ["p1", "p2"], "ground_truth": ["A", float("nan")],
                  "metric": ["gpqa_em", "mmlu_pro_em"]}).to_pickle(ds_r1)
    r1 = datasets.read("deepseek-r1", ds_r1).samples
    assert [(s.prompt, s.ground_truth, s.dataset) for s in r1] == [
        ("p1", "A", "gpqa"), ("p2", None, "mmlupro")]  # as eval_accuracy.py names them

    oss = tmp_path / "gpt_oss.pkl"
    pd.DataFrame({"input_tokens": [np.array([5, 6, 7])], "dataset": ["aime25"],
                  "ground_truth": ["12"]}).to_pickle(oss)
    s = datasets.read("gpt-oss-120b", oss).samples[0]
    assert (s.input_ids, s.dataset, s.ground_truth) == ([5, 6, 7], "aime25", "12")
    if importlib.util.find_spec("pyarrow") is not None:  # the format the README recommends
        pq = tmp_path / "gpt_oss.parquet"
        pd.read_pickle(oss).to_parquet(pq)
        s = datasets.read("gpt-oss-120b", pq).samples[0]
        assert (s.input_ids, s.dataset, s.ground_truth) == ([5, 6, 7], "aime25", "12")


def test_wrong_files_say_what_is_wrong(tmp_path):
    with pytest.raises(DatasetError, match="not found"):
        datasets.read("llama3.1-8b", tmp_path / "missing.json")
    (tmp_path / "dict.json").write_text('{"a": 1}')
    with pytest.raises(DatasetError, match="not a JSON list of records"):
        datasets.read("llama3.1-8b", tmp_path / "dict.json")
    (tmp_path / "bad.json").write_text("[{")
    with pytest.raises(DatasetError, match="not JSON"):
        datasets.read("llama3.1-8b", tmp_path / "bad.json")
    (tmp_path / "other.json").write_text(json.dumps([{"question": "q", "answer": "a"}]))
    with pytest.raises(DatasetError, match="no tok_input field: not the llama3.1-8b reference "
                                           "dataset \\(fields: answer, question\\)"):
        datasets.read("llama3.1-8b", tmp_path / "other.json")
    (tmp_path / "strs.json").write_text(json.dumps([{"tok_input": ["x"], "output": "o"}]))
    with pytest.raises(DatasetError, match="sample 0: input_ids"):
        datasets.read("llama3.1-8b", tmp_path / "strs.json")
    (tmp_path / "text.pkl").write_text("not a pickle")
    with pytest.raises(DatasetError, match="not a pandas pickle file"):
        datasets.read("deepseek-r1", tmp_path / "text.pkl")
    (tmp_path / "list.pkl").write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(DatasetError, match="holds a list, not a DataFrame"):
        datasets.read("deepseek-r1", tmp_path / "list.pkl")
    (tmp_path / "x.parquet").write_bytes(b"PAR1")
    if importlib.util.find_spec("pyarrow") is not None:
        with pytest.raises(DatasetError, match="not a pandas parquet file"):
            datasets.read("gpt-oss-120b", tmp_path / "x.parquet")
    else:
        with pytest.raises(ConfigError, match="reading x.parquet needs pyarrow"):
            datasets.read("gpt-oss-120b", tmp_path / "x.parquet")
    pd.DataFrame({"text_input": ["p"]}).to_pickle(tmp_path / "nogt.pkl")
    with pytest.raises(DatasetError, match="no gt_output or ground_truth field"):
        datasets.read("deepseek-r1", tmp_path / "nogt.pkl")
