"""SQuAD v1.1 exact match and F1, as ``language/bert/evaluate_v1.1.py`` defines them.

Answers are normalised by lower-casing, dropping ``string.punctuation`` characters, replacing the
words a/an/the with spaces and collapsing whitespace. F1 is over the bag of normalised words. A
question scores the best value over its gold answers; an unanswered question scores 0 and still
counts in the denominator. Results are percentages.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Iterable, Mapping

_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, truth: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(truth)


def f1(prediction: str, truth: str) -> float:
    pred = normalize_answer(prediction).split()
    gold = normalize_answer(truth).split()
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision = same / len(pred)
    recall = same / len(gold)
    return 2 * precision * recall / (precision + recall)


def evaluate(questions: Iterable[tuple[str, Iterable[str]]],
             predictions: Mapping[str, str]) -> dict[str, float]:
    """``{"exact_match": %, "f1": %}`` over ``(question id, gold answers)`` pairs."""
    total = 0
    em_sum = 0.0
    f1_sum = 0.0
    for qid, answers in questions:
        total += 1
        if qid not in predictions:
            continue
        answers = list(answers)
        prediction = predictions[qid]
        em_sum += max(float(exact_match(prediction, a)) for a in answers)
        f1_sum += max(f1(prediction, a) for a in answers)
    if total == 0:
        return {"exact_match": 0.0, "f1": 0.0}
    return {"exact_match": 100.0 * em_sum / total, "f1": 100.0 * f1_sum / total}
