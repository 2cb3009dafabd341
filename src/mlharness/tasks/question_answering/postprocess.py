"""Start/end logits -> answer text, following ``language/bert/accuracy-squad.py``.

For each example: over its windows, the 20 best start and 20 best end positions (stable
descending sort, so ties keep the lower index) form candidate spans; a span survives when both
ends are real window tokens inside the context, the start has its max context in this window,
end >= start, and it is at most 30 tokens long. The span with the largest start + end logit
(first on ties, in window/start/end order) wins; its word pieces are joined, "##" removed, and
projected back onto the original context words by ``final_text``. No span at all gives "empty".
Only the first n-best entry becomes the prediction, so the rest of the n-best list is not built.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from mlharness.tasks.question_answering.features import FeatureSet
from mlharness.tasks.question_answering.squad import Example
from mlharness.tasks.question_answering.tokenization import basic_tokenize

N_BEST = 20
MAX_ANSWER_LENGTH = 30
#: what accuracy-squad.py puts at positions the response does not cover
PAD_LOGIT = -10000.0


def best_indexes(logits: np.ndarray, n: int = N_BEST) -> list[int]:
    """Positions of the ``n`` largest values, ties in index order."""
    return np.argsort(-logits, kind="stable")[:n].tolist()


def _without_spaces(text: str) -> tuple[str, dict[int, int]]:
    """``text`` without spaces, and a map from its positions back to ``text``'s."""
    chars: list[str] = []
    back: dict[int, int] = {}
    for i, ch in enumerate(text):
        if ch == " ":
            continue
        back[len(chars)] = i
        chars.append(ch)
    return "".join(chars), back


def final_text(pred_text: str, orig_text: str) -> str:
    """The part of ``orig_text`` that the normalised ``pred_text`` covers (character alignment).

    Falls back to the whole ``orig_text`` whenever the alignment is not one-to-one.
    """
    tok_text = " ".join(basic_tokenize(orig_text, lower=True))
    start = tok_text.find(pred_text)
    if start == -1:
        return orig_text
    end = start + len(pred_text) - 1
    orig_ns, orig_back = _without_spaces(orig_text)
    tok_ns, tok_back = _without_spaces(tok_text)
    if len(orig_ns) != len(tok_ns):
        return orig_text
    tok_forward = {s: ns for ns, s in tok_back.items()}
    if start not in tok_forward or tok_forward[start] not in orig_back:
        return orig_text
    if end not in tok_forward or tok_forward[end] not in orig_back:
        return orig_text
    return orig_text[orig_back[tok_forward[start]]:orig_back[tok_forward[end]] + 1]


def _span_text(tokens: Sequence[str]) -> str:
    text = " ".join(tokens).replace(" ##", "").replace("##", "")
    return " ".join(text.strip().split())


def predict_example(
    example: Example,
    feature_rows: Sequence[int],
    features: FeatureSet,
    logits: Mapping[int, tuple[np.ndarray, np.ndarray]],
    id_to_token: Sequence[str],
) -> str:
    """The answer text for one example from the logits of its windows that are present."""
    best: tuple[float, int, int, int] | None = None
    for row in feature_rows:
        pair = logits.get(row)
        if pair is None:
            continue
        start_logits, end_logits = pair
        n_tokens = int(features.seq_len[row])
        to_orig = features.token_to_orig[row]
        max_ctx = features.max_context[row]
        ends = best_indexes(end_logits)
        for s in best_indexes(start_logits):
            if s >= n_tokens or to_orig[s] < 0 or not max_ctx[s]:
                continue
            for e in ends:
                if e >= n_tokens or to_orig[e] < 0 or e < s or e - s + 1 > MAX_ANSWER_LENGTH:
                    continue
                score = float(start_logits[s]) + float(end_logits[e])
                if best is None or score > best[0]:
                    best = (score, row, s, e)
    if best is None:
        return "empty"
    _, row, s, e = best
    ids = features.input_ids[row, s:e + 1]
    pred = _span_text([id_to_token[i] for i in ids])
    to_orig = features.token_to_orig[row]
    orig = " ".join(example.doc_tokens[to_orig[s]:to_orig[e] + 1])
    return final_text(pred, orig)
