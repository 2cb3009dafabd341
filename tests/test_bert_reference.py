"""Equality with the official BERT scripts, run on our data and logs.

Needs the official repository (``$MLHARNESS_INFERENCE_REPO``, default /tmp/inference) and a Python
with ``transformers``, ``six`` and ``pkg_resources`` (``$MLHARNESS_SQUAD_REF_PYTHON``, default the
running interpreter), since ``language/bert/accuracy-squad.py`` builds its features with
``transformers.BertTokenizer``. Skipped otherwise. The official script imports a ``tokenization``
module from a git submodule (DeepLearningExamples) that the checkout lacks; we give it the
BasicTokenizer of ``transformers`` under that name, an implementation independent of ours.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mlharness.cli.main import main
from mlharness.tasks.question_answering.task import BertSquadTask
from mlharness.tasks.question_answering.tokenization import WordPieceTokenizer, basic_tokenize
from synthetic_squad import make_bert_onnx, make_squad, make_vocab, vocab_size

REPO = Path(os.environ.get("MLHARNESS_INFERENCE_REPO", "/tmp/inference"))
BERT_DIR = REPO / "language" / "bert"
REF_PYTHON = os.environ.get("MLHARNESS_SQUAD_REF_PYTHON", sys.executable)

SHIM = """\
from transformers.models.bert.tokenization_bert import BasicTokenizer as _Basic, whitespace_tokenize
def BasicTokenizer(do_lower_case=True):
    return _Basic(do_lower_case=do_lower_case)
def printable_text(text):
    return text
"""

TOKENIZE = """\
import json, sys
from transformers import BertTokenizer
from transformers.models.bert.tokenization_bert import BasicTokenizer
tok = BertTokenizer(sys.argv[1])
basic = BasicTokenizer(do_lower_case=True)
texts = json.load(open(sys.argv[2], encoding="utf-8"))
json.dump({"full": [tok.tokenize(t) for t in texts], "basic": [basic.tokenize(t) for t in texts]},
          open(sys.argv[3], "w"))
"""

DUMP_FEATURES = """\
import json, pickle, sys
sys.path.insert(0, sys.argv[1])
feats = pickle.load(open(sys.argv[2], "rb"))
json.dump([{"example_index": f.example_index, "input_ids": f.input_ids,
            "input_mask": f.input_mask, "segment_ids": f.segment_ids, "n_tokens": len(f.tokens),
            "to_orig": {str(k): v for k, v in f.token_to_orig_map.items()},
            "max_ctx": {str(k): v for k, v in f.token_is_max_context.items()}} for f in feats],
          open(sys.argv[3], "w"))
"""


def _reference_ready() -> str | None:
    if not (BERT_DIR / "accuracy-squad.py").is_file():
        return f"official repository not found at {REPO}"
    probe = subprocess.run([REF_PYTHON, "-c", "import transformers, six, pkg_resources, numpy"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return ("no Python with transformers/six/pkg_resources; set MLHARNESS_SQUAD_REF_PYTHON "
                "(see docs/bert.md)")
    return None


pytestmark = pytest.mark.skipif(_reference_ready() is not None,
                                reason=_reference_ready() or "")


@pytest.fixture(scope="module")
def ref(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bertref")
    squad = make_squad(root / "dev-v1.1.json", articles=5, seed=31)
    vocab = make_vocab(root / "vocab.txt", squad)
    model = make_bert_onnx(root / "bert.onnx", vocab_size(vocab), seed=3)
    (root / "shim").mkdir()
    (root / "shim" / "tokenization.py").write_text(SHIM)
    return {"root": root, "squad": squad, "vocab": vocab, "model": model}


def _ref_run(args: list[str], ref: dict[str, Path], cwd: Path) -> str:
    env = dict(os.environ, PYTHONPATH=str(ref["root"] / "shim"))
    out = subprocess.run([REF_PYTHON, *args], capture_output=True, text=True, env=env, cwd=cwd)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def official_accuracy(ref: dict[str, Path], log: Path, work: Path) -> str:
    """The last line accuracy-squad.py prints (evaluate_v1.1's json) for ``log``."""
    stdout = _ref_run([str(BERT_DIR / "accuracy-squad.py"), "--vocab_file", str(ref["vocab"]),
                       "--val_data", str(ref["squad"]), "--log_file", str(log),
                       "--out_file", str(work / "predictions.json"),
                       "--features_cache_file", str(work / "eval_features.pickle")], ref, work)
    return stdout.strip().splitlines()[-1]


def test_tokens_equal_bert_tokenizer(ref: dict[str, Path], tmp_path: Path) -> None:
    data = json.loads(ref["squad"].read_text(encoding="utf-8"))
    texts = ["naïve café", "中国人民", "x\x00y\ufffdz\x07", "a\u2028b", "[CLS] foo[SEP]bar [cls]",
             "ΟΔΟΣ ΑΣ.Β", "İstanbul", "Ｆｕｌｌｗｉｄｔｈ", "ﬁne", "e\u0301", "\u00ad", "¿Qué?",
             "\u3000x", "👍🏽", "a" * 101, "‘q’ “d”", "1,000.5", "a\u200bb", "ß ẞ Ⅻ \u0085x"]
    for article in data["data"]:
        for p in article["paragraphs"]:
            texts.append(p["context"])
            texts.extend(p["context"].split())
            texts.extend(qa["question"] for qa in p["qas"])
    (tmp_path / "texts.json").write_text(json.dumps(texts), encoding="utf-8")
    (tmp_path / "tok.py").write_text(TOKENIZE)
    _ref_run([str(tmp_path / "tok.py"), str(ref["vocab"]), str(tmp_path / "texts.json"),
              str(tmp_path / "out.json")], ref, tmp_path)
    theirs = json.loads((tmp_path / "out.json").read_text())
    tok = WordPieceTokenizer.from_file(ref["vocab"])
    assert [tok.tokenize(t) for t in texts] == theirs["full"]
    assert [basic_tokenize(t) for t in texts] == theirs["basic"]


def test_features_and_accuracy_equal_official(ref: dict[str, Path], tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    main(["run", "-b", "bert-99", "--model", str(ref["model"]), "--dataset", str(ref["squad"]),
          "--vocab", str(ref["vocab"]), "--cache-dir", str(tmp_path / "cache"), "--mode",
          "accuracy", "--no-progress", "--output-dir", str(runs), "--test"])
    [run_dir] = list((runs / "bert-99").iterdir())
    ours = (run_dir / "accuracy.txt").read_text().strip().splitlines()[0]
    assert official_accuracy(ref, run_dir / "mlperf_log_accuracy.json", tmp_path) == ours

    # the features the official script built (and pickled) equal ours
    (tmp_path / "dump.py").write_text(DUMP_FEATURES)
    _ref_run([str(tmp_path / "dump.py"), str(BERT_DIR), str(tmp_path / "eval_features.pickle"),
              str(tmp_path / "features.json")], ref, tmp_path)
    theirs = json.loads((tmp_path / "features.json").read_text())
    fs = BertSquadTask("bert-99", ref["squad"], ref["vocab"], cache_dir=tmp_path / "cache").features
    assert len(theirs) == len(fs)
    for row, f in enumerate(theirs):
        assert f["example_index"] == fs.example_index[row]
        assert f["input_ids"] == fs.input_ids[row].tolist()
        assert f["input_mask"] == fs.input_mask[row].tolist()
        assert f["segment_ids"] == fs.segment_ids[row].tolist()
        assert f["n_tokens"] == fs.seq_len[row]
        to_orig = {int(k): v for k, v in f["to_orig"].items()}
        assert to_orig == {i: int(v) for i, v in enumerate(fs.token_to_orig[row]) if v >= 0}
        assert {int(k): v for k, v in f["max_ctx"].items()} == {
            i: bool(fs.max_context[row, i]) for i in to_orig}


def test_accuracy_equal_on_crafted_log(ref: dict[str, Path], tmp_path: Path) -> None:
    """Near-answer logits, short responses (padded by the scorer), duplicates, missing samples."""
    from test_bert_accuracy import oracle_entries

    task = BertSquadTask("bert-99", ref["squad"], ref["vocab"], cache_dir=tmp_path / "cache")
    rng = np.random.default_rng(5)
    entries = []
    for i, data in oracle_entries(task):
        if i % 9 == 4:
            continue  # a missing feature
        arr = np.frombuffer(data, np.float32).reshape(384, 2).copy()
        arr += rng.normal(0, 4.0, arr.shape).astype(np.float32)  # some answers go wrong
        n = int(task.features.seq_len[i])
        if i % 5 == 0:
            arr = arr[:n]  # shorter response
        entries.append((i, arr.tobytes()))
        if i % 11 == 0:
            entries.append((i, arr.tobytes()))  # logged twice
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text(json.dumps([{"seq_id": k, "qsl_idx": i, "data": d.hex().upper()}
                               for k, (i, d) in enumerate(entries)]))
    ours = task.score(entries)
    assert 0 < ours.details["exact_match"] < 100
    assert official_accuracy(ref, log, tmp_path) == ours.text
