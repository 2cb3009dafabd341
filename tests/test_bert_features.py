"""SQuAD features: windows, layout, counts, the on-disk cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlharness.errors import DatasetError
from mlharness.rules import rules_for
from mlharness.tasks import TaskOptions, create_task
from mlharness.tasks.question_answering import cache, features as feats
from mlharness.tasks.question_answering.features import best_window, doc_windows
from mlharness.tasks.question_answering.squad import read_examples, split_context
from mlharness.tasks.question_answering.task import BertSquadTask
from mlharness.tasks.question_answering.tokenization import WordPieceTokenizer
from synthetic_squad import make_squad, make_vocab


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("squad")
    squad = make_squad(root / "dev-v1.1.json", articles=4, seed=5)
    return squad, make_vocab(root / "vocab.txt", squad)


def test_doc_windows() -> None:
    assert doc_windows(500, 300, 128) == [(0, 300), (128, 300), (256, 244)]
    assert doc_windows(100, 300, 128) == [(0, 100)]
    assert doc_windows(0, 300, 128) == []
    assert doc_windows(428, 300, 128) == [(0, 300), (128, 300)]


def test_best_window_prefers_more_context() -> None:
    windows = [(0, 5), (2, 5), (4, 5)]  # the docstring example of the reference
    assert best_window(windows, 4) == 1  # 2 left / 2 right in the middle window
    assert best_window(windows, 0) == 0
    assert best_window(windows, 8) == 2
    assert best_window(windows, 9) is None


def test_split_context_uses_reference_whitespace() -> None:
    assert split_context(" a\tb\u202fc\u00a0d \n") == ["a", "b", "c\u00a0d"]


def test_feature_layout(files: tuple[Path, Path], tmp_path: Path) -> None:
    squad, vocab = files
    tok = WordPieceTokenizer.from_file(vocab)
    examples = read_examples(squad)
    fs = feats.build_features(examples, tok)
    cls_id, sep_id = tok.convert_tokens_to_ids(["[CLS]", "[SEP]"])
    per_example = np.bincount(fs.example_index, minlength=len(examples))
    assert per_example.min() >= 1 and per_example.max() >= 3  # some need several windows
    for row in range(len(fs)):
        ex = examples[fs.example_index[row]]
        n = fs.seq_len[row]
        ids = fs.input_ids[row]
        q = len(tok.tokenize(ex.question)[:64])
        assert ids[0] == cls_id and ids[q + 1] == sep_id and ids[n - 1] == sep_id
        assert (ids[n:] == 0).all() and fs.input_mask[row].sum() == n
        assert (fs.segment_ids[row, :q + 2] == 0).all()
        assert (fs.segment_ids[row, q + 2:n] == 1).all() and (fs.segment_ids[row, n:] == 0).all()
        in_doc = fs.token_to_orig[row] >= 0
        assert in_doc.sum() == n - q - 3 and in_doc[q + 2:n - 1].all()
        assert not fs.max_context[row, ~in_doc].any()
    # every context word piece is "max context" in exactly one window of its example
    for ex_index in np.flatnonzero(per_example > 1):
        ex = examples[ex_index]
        n_pieces = sum(len(tok.tokenize(w)) for w in ex.doc_tokens)
        q = len(tok.tokenize(ex.question)[:64])
        windows = doc_windows(n_pieces, 384 - q - 3, 128)
        rows = np.flatnonzero(fs.example_index == ex_index)
        assert len(rows) == len(windows)
        owners = np.zeros(n_pieces, int)
        for row, (start, length) in zip(rows, windows):
            owners[start:start + length] += fs.max_context[row, q + 2:q + 2 + length]
        assert (owners == 1).all()


def test_question_cut_to_64_pieces(files: tuple[Path, Path]) -> None:
    squad, vocab = files
    tok = WordPieceTokenizer.from_file(vocab)
    long_q = [e for e in read_examples(squad) if len(tok.tokenize(e.question)) > 64]
    assert long_q, "the generator makes some overlong questions"
    fs = feats.build_features(long_q[:1], tok)
    assert fs.segment_ids[0].tolist().index(1) == 64 + 2


def test_task_counts_and_cache(files: tuple[Path, Path], tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    squad, vocab = files
    seen: list[tuple[int, int, str]] = []
    task = create_task("bert-99", TaskOptions(dataset=squad, vocab=vocab, cache_dir=tmp_path))
    task.prepare(lambda d, t, label: seen.append((d, t, label)))
    assert seen and seen[-1][0] == seen[-1][1] and seen[-1][2] == "tokenising SQuAD"
    n = task.total_count()
    assert task.performance_count() == n == len(task.features)
    assert task.loadgen_model == "bert" and task.target == pytest.approx(90.874 * 0.99)
    [path] = list((tmp_path / "squad").glob("features-*.npz"))
    with np.load(path, allow_pickle=False) as data:  # plain arrays, no pickle
        assert data["input_ids"].shape == (n, 384)

    def boom(*a, **k):
        raise AssertionError("features rebuilt although cached")

    monkeypatch.setattr("mlharness.tasks.question_answering.task.build_features", boom)
    again = BertSquadTask("bert-99.9", squad, vocab, cache_dir=tmp_path,
                          rules=rules_for("bert-99.9"))  # a task is handed its rules
    assert again.total_count() == n and again.target == pytest.approx(90.874 * 0.999)
    small = BertSquadTask("bert-99", squad, vocab, cache_dir=tmp_path, max_samples=7)
    assert small.total_count() == small.performance_count() == 7
    assert [t.shape for t in small.model_inputs] == [(None, None)] * 3
    fixed = BertSquadTask("bert-99", squad, vocab, cache_dir=tmp_path, sequence_length="fixed")
    assert [(t.name, t.dtype, t.shape) for t in fixed.model_inputs] == [
        ("input_ids", "int64", (None, 384)), ("input_mask", "int64", (None, 384)),
        ("segment_ids", "int64", (None, 384))]


def test_cache_key_tracks_inputs(files: tuple[Path, Path], tmp_path: Path) -> None:
    squad, vocab = files
    params = {"max_seq_length": 384, "max_query_length": 64, "doc_stride": 128}
    key = cache.cache_key(squad, vocab, params)
    other_vocab = tmp_path / "vocab.txt"
    other_vocab.write_text(vocab.read_text() + "extra\n")
    assert cache.cache_key(squad, other_vocab, params) != key
    assert cache.cache_key(squad, vocab, {**params, "doc_stride": 64}) != key
    assert cache.cache_key(squad, vocab, dict(params)) == key
    broken = tmp_path / "broken.npz"
    broken.write_bytes(b"not a zip")
    assert cache.load_features(broken) is None


def test_dataset_errors(files: tuple[Path, Path], tmp_path: Path) -> None:
    squad, vocab = files
    with pytest.raises(DatasetError, match="needs --vocab"):
        create_task("bert-99", TaskOptions(dataset=squad))
    with pytest.raises(DatasetError, match="not found"):
        create_task("bert-99", TaskOptions(dataset=tmp_path / "nope.json", vocab=vocab))
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": "1.1", "data": [{"paragraphs": [{"qas": []}]}]}')
    with pytest.raises(DatasetError, match="malformed"):
        read_examples(bad)
    bad.write_text("{not json")
    with pytest.raises(DatasetError, match="not valid json"):
        read_examples(bad)
