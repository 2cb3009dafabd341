"""gpt-oss-120b's exact match, for the parts that need no code execution.

language/gpt-oss-120b/eval_mlperf_accuracy.py scores **every** entry of the accuracy log (no
de-duplication; entries past the data set are left out), decoded with special tokens kept, by
its row's data set (the first of gpqa, mmlu_pro, math500, aime, livecodebench, mmlu in the
lower-cased name). Multiple choice reads the Harmony ``final`` channel first (eval_accuracy.py:
a leading letter, then "Answer: X", then the last ANSWER/FINAL ANSWER letter of the whole text,
then for A-J the last standalone letter); AIME as deepseek-r1's. The score is
``sum(correct / repeats) / sum(total / repeats) x 100`` over the data sets, with the script's
repeats (aime25 8, gpqa_diamond 5, livecodebench_v6 3, else 1).

Not scored here: livecodebench (runs the generated code) and math500 (PRM800K grader); with such
entries ``exact_match`` is None — score the log with the official script in the reference
container (its submodules checked out).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from mlharness.errors import DatasetError
from mlharness.llm.accuracy_log import read_entries
from mlharness.llm.exact_match import NOT_SCORED, clean_text, judge, kind_of
from mlharness.llm.rouge import Decoder

KINDS = ("gpqa", "mmlu_pro", "math500", "aime", "livecodebench", "mmlu")
#: eval_mlperf_accuracy.py's DATASET_REPEATS
REPEATS = {"aime25": 8, "gpqa_diamond": 5, "livecodebench_v6": 3}


def _kind(name: str) -> str:
    kind = kind_of(name, KINDS)
    if kind is None:
        raise DatasetError(f"no gpt-oss-120b scorer for data set {name!r}",
                           "its rows come from aime25, gpqa_diamond, livecodebench_v6")
    return kind


def final_channel(text: str) -> str:
    """The Harmony ``<|channel|>final<|message|>`` section, else the whole text."""
    text = clean_text(text)
    m = re.search(r"<\|channel\|>final[^<]*<\|message\|>(.*?)(?:<\|return\|>|$)", text,
                  re.DOTALL)
    return m.group(1).strip() if m else text


def choice_answer(text: str, last_option: str) -> str | None:
    """The chosen letter A..``last_option`` as gpt-oss's parser finds it, or None."""
    text = clean_text(text)
    if not text:
        return None
    final = re.sub(r"\*\*([^*]+)\*\*", r"\1", final_channel(text))
    if final[:2] in ("['", '["') and final[-2:] in ("']", '"]'):
        final = final[2:-2].strip()
    final = final.replace("\\n", "\n").replace("\\'", "'")
    letters = rf"[A-{last_option}]"
    m = re.match(rf"^[^a-zA-Z]*({letters})(?:[^a-zA-Z]|$)", final.strip(), re.IGNORECASE)
    if m is None:
        m = re.search(rf"\b(?:Answer|ANSWER)\s*[:.]?\s*({letters})\b", final, re.IGNORECASE)
    if m is not None:
        return m.group(1).upper()
    whole = text.replace("\\n", "\n").replace("\\'", "'")
    marked = re.findall(rf"\b(?:ANSWER|FINAL\s*ANSWER)\b\s*[:=]?\s*(?:\(?\s*({letters})\s*\)?)"
                        r"(?:\s*$|[^A-Za-z])", whole, re.IGNORECASE)
    if marked:
        return marked[-1].upper()
    if last_option == "J":
        loose = re.findall(rf"\b({letters})\b", final, re.IGNORECASE)
        if loose:
            return loose[-1].upper()
    return None


def is_correct(kind: str, output: str, truth: Any) -> bool:
    """One entry's verdict (kinds in ``NOT_SCORED`` raise)."""
    return judge(kind, output, truth, choice=choice_answer, not_scored=NOT_SCORED,
                 what="entries", script="eval_mlperf_accuracy.py")


class GptOssResult(BaseModel):
    """Per data set (lower-cased name): entries and correct ones; ``unscored``: entries of kinds
    not scored here."""

    correct: dict[str, int]
    total: dict[str, int]
    unscored: dict[str, int]

    @property
    def exact_match(self) -> float | None:
        """The official weighted score (percent), when every entry was scored."""
        if self.unscored or not self.total:
            return None
        score = max_score = 0.0
        for name in sorted(self.total):
            repeats = REPEATS.get(name, 1)
            score += self.correct[name] / repeats
            max_score += self.total[name] / repeats
        return score / max_score * 100

    def accuracy_line(self) -> str:
        """The line the official script prints for the checker."""
        if self.exact_match is None:
            raise DatasetError(f"{sum(self.unscored.values())} entries were not scored "
                               f"({', '.join(self.unscored)})",
                               "score the log with the official eval_mlperf_accuracy.py")
        return f"'exact_match': {self.exact_match:.3f}"


def score(outputs: Sequence[str], truths: Sequence[Any], datasets: Sequence[str]
          ) -> GptOssResult:
    """Score decoded outputs with their rows' ground truth and data set names."""
    correct: dict[str, int] = {}
    total: dict[str, int] = {}
    unscored: dict[str, int] = {}
    for out, truth, ds in zip(outputs, truths, datasets, strict=True):
        name = str(ds).lower()
        kind = _kind(name)
        if kind in NOT_SCORED:
            unscored[name] = unscored.get(name, 0) + 1
            continue
        total[name] = total.get(name, 0) + 1
        correct[name] = correct.get(name, 0) + int(is_correct(kind, out, truth))
    return GptOssResult(correct=correct, total=total, unscored=unscored)


def score_log(log: Path, truths: Sequence[Any], datasets: Sequence[str], decode: Decoder
              ) -> GptOssResult:
    """Score every entry of a LoadGen accuracy log (int32 ids, as the official script reads
    them); ``decode``: ``hf_decoder(dir, use_fast=True, skip_special_tokens=False)``."""
    entries = [e for e in read_entries(log) if e.qsl_idx < len(truths)]
    if not entries:
        raise DatasetError(f"{log} holds no entry of this data set", "is this the right log?")
    texts = decode([e.tokens("int32") for e in entries])
    return score(texts, [truths[e.qsl_idx] for e in entries],
                 [datasets[e.qsl_idx] for e in entries])
