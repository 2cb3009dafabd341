"""SQuAD v1.1 scoring: normalisation, EM/F1 by hand, answer projection, n-best order, oracle runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mlharness.errors import DatasetError
from mlharness.tasks.question_answering.evaluate import evaluate, exact_match, f1, normalize_answer
from mlharness.tasks.question_answering.postprocess import best_indexes, final_text
from mlharness.tasks import benchmark_rules
from mlharness.tasks.question_answering.task import BertSquadTask
from synthetic_squad import make_squad, make_vocab


def test_normalize_answer() -> None:
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("an apple, a pear and THE plum") == "apple pear and plum"
    assert normalize_answer("theory") == "theory"  # articles only as whole words


@pytest.mark.parametrize("pred, gold, em, f", [
    ("Eiffel Tower", "the Eiffel Tower", True, 1.0),
    ("the Eiffel Tower", "Eiffel Tower in Paris", False, 2 * 1.0 * 0.5 / 1.5),  # p=1, r=1/2
    ("in Paris France", "Paris", False, 2 * (1 / 3) * 1 / (1 / 3 + 1)),  # p=1/3, r=1
    ("red red blue", "red blue blue", False, 2 / 3),  # bag overlap: red + blue = 2 of 3
    ("nothing", "something", False, 0.0),
    ("", "x", False, 0.0),
])
def test_em_f1_by_hand(pred: str, gold: str, em: bool, f: float) -> None:
    assert exact_match(pred, gold) is em
    assert f1(pred, gold) == pytest.approx(f)


def test_evaluate_counts_unanswered_and_takes_best_gold() -> None:
    questions = [("q1", ["Paris", "in Paris"]), ("q2", ["1895"]), ("q3", ["x"])]
    result = evaluate(questions, {"q1": "in Paris", "q2": "1895 and 1943"})
    assert result["exact_match"] == pytest.approx(100 * 1 / 3)
    # q2: p = 1/3, r = 1 -> F1 = 2 * (1/3) / (4/3) = 0.5
    assert result["f1"] == pytest.approx(100 * (1 + 0.5) / 3)


def test_final_text_projection() -> None:
    assert final_text("steve smith", "Steve Smith's") == "Steve Smith"
    assert final_text("1895", "(1895-1943).") == "1895"
    assert final_text("cafe", "Café,") == "Café"  # accents stripped in the prediction only
    assert final_text("nowhere", "Steve Smith") == "Steve Smith"  # not found: whole text
    # lengths differ after tokenisation (the soft hyphen vanishes): whole text
    assert final_text("soft", "\u00adsoft") == "\u00adsoft"


def test_best_indexes_break_ties_by_position() -> None:
    logits = np.array([1.0, 3.0, 3.0, -10000.0, 2.0, 3.0])
    assert best_indexes(logits, 4) == [1, 2, 5, 4]
    assert best_indexes(np.full(30, -10000.0), 20) == list(range(20))


def oracle_entries(task: BertSquadTask) -> list[tuple[int, bytes]]:
    """Responses whose argmax is each example's first gold answer (in its max-context window)."""
    from mlharness.tasks.question_answering.squad import load_squad, read_examples

    data = load_squad(task.dataset)
    starts = [qa["answers"][0]["answer_start"] for a in data["data"] for p in a["paragraphs"]
              for qa in p["qas"]]
    contexts = [p["context"] for a in data["data"] for p in a["paragraphs"] for qa in p["qas"]]
    examples = read_examples(task.dataset)
    fs = task.features
    entries = []
    for row in range(len(fs)):
        ex_i = int(fs.example_index[row])
        ex = examples[ex_i]
        answer = ex.answers[0]
        # word index of the answer's first and last character (reference char_to_word_offset)
        before = contexts[ex_i][:starts[ex_i]]
        first_word = len(before.split()) if not before or before[-1] in " \t\r\n\u202f" \
            else len(before.split()) - 1
        last_word = first_word + len(answer.split()) - 1
        logits = np.full((384, 2), -5.0, np.float32)
        pos = np.flatnonzero((fs.token_to_orig[row] == first_word) & fs.max_context[row])
        end = np.flatnonzero(fs.token_to_orig[row] == last_word)
        if len(pos) and len(end) and end[-1] - pos[0] < 30:
            logits[pos[0], 0] = 10.0
            logits[end[-1], 1] = 10.0
        entries.append((row, logits.tobytes()))
    return entries


def test_oracle_logits_score_100(tmp_path: Path) -> None:
    squad = make_squad(tmp_path / "dev-v1.1.json", articles=3, seed=11)
    vocab = make_vocab(tmp_path / "vocab.txt", squad)
    task = BertSquadTask("bert-99", squad, vocab, cache_dir=tmp_path / "cache",
                         rules=benchmark_rules("bert-99"))
    result = task.score(oracle_entries(task))
    # answers longer than 30 pieces cannot be predicted; everything else must be exact
    assert result.value == 100.0 and result.details["exact_match"] == 100.0
    assert result.text == json.dumps({"exact_match": result.details["exact_match"],
                                      "f1": result.details["f1"]})
    assert result.passed is (result.value >= 90.874 * 0.99)
    # a random log scores low, an empty log scores 0 on every question
    empty = task.score([])
    assert empty.text == '{"exact_match": 0.0, "f1": 0.0}'
    assert empty.details["questions"] == 36


def test_score_rejects_foreign_logs(tmp_path: Path) -> None:
    squad = make_squad(tmp_path / "dev-v1.1.json", articles=1, seed=2)
    vocab = make_vocab(tmp_path / "vocab.txt", squad)
    task = BertSquadTask("bert-99", squad, vocab, cache_dir=tmp_path / "cache")
    with pytest.raises(DatasetError, match="outside"):
        task.score([(10_000, b"\0" * 3072)])
    with pytest.raises(DatasetError, match="bytes"):
        task.score([(0, b"\0" * 12)])


def test_max_samples_scores_only_covered_questions(tmp_path: Path) -> None:
    squad = make_squad(tmp_path / "dev-v1.1.json", articles=2, seed=4)
    vocab = make_vocab(tmp_path / "vocab.txt", squad)
    full = BertSquadTask("bert-99", squad, vocab, cache_dir=tmp_path / "cache")
    part = BertSquadTask("bert-99", squad, vocab, cache_dir=tmp_path / "cache", max_samples=5)
    result = part.score(oracle_entries(full)[:5])
    covered = len(set(full.features.example_index[:5].tolist()))
    assert result.details["questions"] == covered
    assert result.details["dataset_features"] == len(full.features)
