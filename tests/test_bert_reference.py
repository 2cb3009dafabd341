"""Equality with the official BERT scripts, run on our data and logs.

``language/bert/accuracy-squad.py`` runs in the referee's Python (tests/referee.py: ``transformers``
for its ``BertTokenizer``, ``six``, ``pkg_resources``), with the official ``tokenization`` module
(google-research/bert's, a git submodule upstream; ``bert-tokenization/`` beside the pinned
checkout) on its path. Skipped without the referee, failing under CI=true.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import referee
from mlharness.cli.main import main
from mlharness.tasks.question_answering.task import BertSquadTask
from mlharness.tasks.question_answering.tokenization import WordPieceTokenizer, basic_tokenize
from synthetic_squad import make_bert_onnx, make_squad, make_vocab, vocab_size

BERT = "language/bert"
pytestmark = referee.official(f"{BERT}/accuracy-squad.py", f"{BERT}/create_squad_data.py",
                              python=True)

#: the features come from transformers' BertTokenizer (accuracy-squad.py, create_squad_data.py);
#: get_final_text re-tokenizes with the official tokenization.BasicTokenizer
TOKENIZE = """\
import json, sys
import tokenization
from transformers import BertTokenizer
from transformers.models.bert.tokenization_bert import BasicTokenizer
tok = BertTokenizer(sys.argv[1])
basic = BasicTokenizer(do_lower_case=True)
official = tokenization.BasicTokenizer(do_lower_case=True)
texts = json.load(open(sys.argv[2], encoding="utf-8"))
json.dump({"full": [tok.tokenize(t) for t in texts], "basic": [basic.tokenize(t) for t in texts],
           "official_basic": [official.tokenize(t) for t in texts]}, open(sys.argv[3], "w"))
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


@pytest.fixture(scope="module")
def ref(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bertref")
    squad = make_squad(root / "dev-v1.1.json", articles=5, seed=31)
    vocab = make_vocab(root / "vocab.txt", squad)
    model = make_bert_onnx(root / "bert.onnx", vocab_size(vocab), seed=3)
    return {"root": root, "squad": squad, "vocab": vocab, "model": model}


def official_accuracy(ref: dict[str, Path], log: Path, work: Path) -> str:
    """The last line accuracy-squad.py prints (evaluate_v1.1's json) for ``log``."""
    stdout = referee.run(f"{BERT}/accuracy-squad.py", "--vocab_file", str(ref["vocab"]),
                         "--val_data", str(ref["squad"]), "--log_file", str(log),
                         "--out_file", str(work / "predictions.json"),
                         "--features_cache_file", str(work / "eval_features.pickle"),
                         cwd=work, check=True).stdout
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
    referee.python(str(tmp_path / "tok.py"), str(ref["vocab"]), str(tmp_path / "texts.json"),
                   str(tmp_path / "out.json"), cwd=tmp_path)
    theirs = json.loads((tmp_path / "out.json").read_text())
    tok = WordPieceTokenizer.from_file(ref["vocab"])
    assert [tok.tokenize(t) for t in texts] == theirs["full"]
    assert [basic_tokenize(t) for t in texts] == theirs["basic"]
    assert [basic_tokenize(t) for t in texts] == theirs["official_basic"]


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
    referee.python(str(tmp_path / "dump.py"), str(referee.INFERENCE / BERT),
                   str(tmp_path / "eval_features.pickle"), str(tmp_path / "features.json"),
                   cwd=tmp_path)
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
