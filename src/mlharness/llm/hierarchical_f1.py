"""qwen3-vl-235b-a22b's accuracy: the category hierarchical F1 of the official scorer, offline.

As ``multimodal/qwen3-vl/src/mlperf_inf_mm_q3vl/evaluation.py`` (``run_evaluation``) scores an
accuracy log: each response (the logged UTF-8 text) is validated as the answer's JSON
(:class:`~mlharness.llm.product_request.ProductMetadata`); one that does not validate becomes a
pad category as deep as the truth (so it matches no level), a pad brand and a random
second-hand flag. A predicted path and the true one (split at ``" > "``, each level stripped)
share their longest common prefix; hierarchical precision and recall are the shared levels over
all predicted and all true levels, summed over the log, and F1 their harmonic mean. The
checker reads ``{"f1": ...}`` from ``accuracy.txt`` (``ACC_PATTERN["F1_HIERARCHICAL"]``).

Beside it, as the script prints them: the brand score (a fuzzy match, Indel similarity above
90 of 100, as ``rapidfuzz.fuzz.ratio``) and the second-hand flag's F1 (scikit-learn's binary F1,
0 when undefined). The random flags of unparsable responses come from the script's seeded
generators, chunk by chunk (``chunks``: its worker count, ``min(os.cpu_count(), 4)``), so the
second-hand F1 equals the script's on a machine with as many workers.

The endpoints client's scorer (``evaluation/scoring.py`` ``ShopifyCategoryF1Scorer``) computes
the same F1 except that it strips the predicted category and the truth as whole strings before
splitting; the two differ only for a path that starts or ends with the separator.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from pydantic import ValidationError

from mlharness.llm.product_catalogue import Product
from mlharness.llm.product_request import ProductMetadata

SEPARATOR = " > "
#: what evaluation.py puts in place of an unparsable response's fields
CATEGORY_PAD = "<|__PRED_CATEGORY_PAD__|>"
BRAND_PAD = "<|__PRED_BRAND_PAD__|>"
#: evaluation.py's ``_MAX_JOBS`` and the evaluate command's default ``--random-seed``
MAX_CHUNKS = 4
SEED = 12345
BRAND_MATCH = 90  # a brand matches when its similarity is above this (of 100)


def path_components(predicted: str, true: str) -> tuple[int, int, int]:
    """(shared leading levels, predicted levels, true levels) of two category paths."""
    pred = [c.strip() for c in predicted.split(SEPARATOR)]
    truth = [c.strip() for c in true.split(SEPARATOR)]
    shared = 0
    for p, t in zip(pred, truth):
        if p != t:
            break
        shared += 1
    return shared, len(pred), len(truth)


def hierarchical_f1(pairs: Sequence[tuple[str, str]]) -> float:
    """F1 of hierarchical precision and recall summed over ``(predicted, true)`` paths."""
    shared = predicted = true = 0
    for pred, truth in pairs:
        s, p, t = path_components(pred, truth)
        shared, predicted, true = shared + s, predicted + p, true + t
    hp = shared / predicted if predicted else 0.0
    hr = shared / true if true else 0.0
    return 0.0 if hp + hr == 0 else 2 * hp * hr / (hp + hr)


def similarity(a: str, b: str) -> float:
    """Indel similarity in 0..100 (``rapidfuzz.fuzz.ratio``): 200 x LCS / (len a + len b)."""
    if not a and not b:
        return 100.0
    previous = [0] * (len(b) + 1)
    for ca in a:
        current = [0]
        for j, cb in enumerate(b):
            current.append(previous[j] + 1 if ca == cb else max(previous[j + 1], current[j]))
        previous = current
    return 200.0 * previous[-1] / (len(a) + len(b))


def brand_score(pairs: Sequence[tuple[str, str]]) -> float:
    """Share of brands whose lower-cased, stripped similarity to the truth is above 90."""
    if not pairs:
        return 0.0
    hits = sum(similarity(t.strip().lower(), p.strip().lower()) > BRAND_MATCH for p, t in pairs)
    return hits / len(pairs)


def binary_f1(pairs: Sequence[tuple[bool, bool]]) -> float:
    """F1 of the positive class over ``(predicted, true)`` flags (0 when undefined)."""
    tp = sum(p and t for p, t in pairs)
    fp = sum(p and not t for p, t in pairs)
    fn = sum(t and not p for p, t in pairs)
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


@dataclass
class Score:
    """An accuracy log scored: the F1 the checker reads and what the script prints beside it."""

    f1: float
    brand: float
    secondhand_f1: float
    responses: int
    unparsable: int
    unparsable_samples: list[int] = field(default_factory=list)

    def accuracy_text(self) -> str:
        """``accuracy.txt`` as the official script writes it (the hash is of the JSON line)."""
        line = json.dumps({"f1": self.f1}, sort_keys=True)
        digest = hashlib.sha256(line.encode()).hexdigest()
        return f"Results\n\n{line}\n\nhash={digest}"

    def details(self) -> dict[str, Any]:
        return {"category_hierarchical_f1": self.f1, "brand_f1": self.brand,
                "is_secondhand_f1": self.secondhand_f1, "responses": self.responses,
                "unparsable_responses": self.unparsable,
                "unparsable_samples": self.unparsable_samples[:20]}


def default_chunks() -> int:
    """The official script's worker count on this machine."""
    return min(os.cpu_count() or 1, MAX_CHUNKS)


def score(entries: Sequence[tuple[int, bytes]], products: Sequence[Product],
          chunks: int | None = None, seed: int = SEED) -> Score:
    """Score ``(qsl_idx, response bytes)`` entries in log order against the catalogue's truth."""
    workers = chunks or default_chunks()
    size = max(len(entries) // workers, 1)
    groups = [entries[i:i + size] for i in range(0, len(entries), size)]
    seeds = np.random.default_rng(seed=seed).integers(0, 2**32, size=len(groups))
    categories: list[tuple[str, str]] = []
    brands: list[tuple[str, str]] = []
    flags: list[tuple[bool, bool]] = []
    unparsable: list[int] = []
    for group, group_seed in zip(groups, seeds):
        rng = np.random.default_rng(group_seed)
        for index, data in group:
            truth = products[index]
            try:
                answer = ProductMetadata.model_validate_json(data.decode("utf-8"))
                category, brand, flag = answer.category, answer.brand, answer.is_secondhand
            except (ValidationError, UnicodeDecodeError):
                unparsable.append(index)
                category = SEPARATOR.join([CATEGORY_PAD] * len(truth.category.split(SEPARATOR)))
                brand, flag = BRAND_PAD, bool(rng.choice([True, False], size=1).tolist()[0])
            categories.append((category, truth.category))
            brands.append((brand, truth.brand))
            flags.append((flag, truth.secondhand))
            if truth.categories:  # the script's random baseline draws: kept in step with it
                rng.choice(truth.categories)
            rng.choice([True, False])
    return Score(f1=hierarchical_f1(categories), brand=brand_score(brands),
                 secondhand_f1=binary_f1(flags), responses=len(entries),
                 unparsable=len(unparsable), unparsable_samples=unparsable)
