"""deepseek-r1's exact match, for the parts that need no code execution.

language/deepseek-r1/eval_accuracy.py scores each sample's decoded output by its source data set
(the first of gpqa, mmlu_pro, math500, aime, livecodebench found in the row's lower-cased data
set name): multiple choice (gpqa A-D, mmlu_pro A-J: the last "ANSWER"/"FINAL ANSWER" letter,
for mmlu_pro else the last standalone letter), AIME (the last ``\\boxed{N}``, else the last
``Answer: N``, an integer 0-999), 100 per correct sample, 0 otherwise; ``exact_match`` is the mean
over all samples and ``tokens_per_sample`` the mean output length in tokens.

Not scored here: **math500** (the official script grades with the PRM800K grader, a git
submodule of the reference, sympy-based answer equivalence) and **livecodebench** (it runs the
generated code against the tests, LiveCodeBench submodule). While a log holds such samples,
``exact_match`` is None and ``partial`` covers the scored ones only; score the full log with the
official ``eval_accuracy.py --input-file mlperf_log_accuracy.json --dataset-file ...`` in the
reference's container (its submodules checked out).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel

from mlharness.errors import DatasetError
from mlharness.llm.accuracy_log import TokenDtype, first_per_sample, read_entries
from mlharness.llm.rouge import Decoder

#: the official evaluators' order (a name containing two keys takes the first)
DATASET_KINDS = ("gpqa", "mmlu_pro", "math500", "aime", "livecodebench")
NOT_SCORED = {"math500": "needs the PRM800K grader (reference submodule)",
              "livecodebench": "runs the generated code (LiveCodeBench submodule)"}


def _kind(dataset: str) -> str:
    kind = kind_of(str(dataset).lower(), DATASET_KINDS)
    if kind is None:
        raise DatasetError(f"no exact-match scorer for data set {dataset!r}",
                           "deepseek-r1 rows come from gpqa, mmlu_pro, math500, aime, "
                           "livecodebench")
    return kind


def kind_of(name: str, kinds: Sequence[str]) -> str | None:
    """The first of ``kinds`` that ``name`` contains (the official scripts' order), or None."""
    return next((kind for kind in kinds if kind in name), None)


def clean_text(text: Any) -> str:
    """A model output as both scripts take it: missing or NaN is empty, else stripped text."""
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return ""
    return str(text).strip()


def choice_answer(text: str, last_option: str) -> str | None:
    """The chosen letter A..``last_option`` (case-insensitive) or None."""
    text = clean_text(text)
    if not text:
        return None
    if text[:2] in ("['", '["') and text[-2:] in ("']", '"]'):
        text = text[2:-2].strip()
    text = text.replace("\\n", "\n").replace("\\'", "'")
    marked = re.findall(
        rf"\b(?:ANSWER|FINAL\s*ANSWER)\b\s*[:=]?\s*(?:\(?\s*([A-{last_option}])\s*\)?)"
        r"(?:\s*$|[^A-Za-z])", text, re.IGNORECASE)
    if marked:
        return marked[-1].upper()
    if last_option == "J":
        loose = re.findall(r"\b([A-J])\b", text, re.IGNORECASE)
        if loose:
            return loose[-1].upper()
    return None


def aime_answer(text: str) -> int | None:
    """The integer answer 0..999 or None."""
    text = clean_text(text)
    if not text:
        return None
    found = re.findall(r"\\boxed{\s*(\d+)\s*}", text) or re.findall(
        r"Answer:\s*(\d+)(?!\.)\b", text, re.IGNORECASE | re.MULTILINE)
    if not found:
        return None
    value = int(found[-1])
    return value if 0 <= value <= 999 else None


def is_correct(kind: str, output: str, truth: Any) -> bool:
    """One sample's verdict (kinds in ``NOT_SCORED`` raise)."""
    return judge(kind, output, truth, choice=choice_answer, not_scored=NOT_SCORED,
                 what="samples", script="eval_accuracy.py")


def judge(kind: str, output: str, truth: Any, *, choice: Callable[[str, str], str | None],
          not_scored: dict[str, str], what: str, script: str) -> bool:
    """Exact match of one output as deepseek-r1's and gpt-oss-120b's scripts judge it: AIME by
    the integer answer, GPQA (A-D) and MMLU(-Pro) (A-J) by the letter ``choice`` finds; the
    kinds in ``not_scored`` raise, naming the official ``script`` that scores them."""
    if kind in not_scored:
        raise DatasetError(f"{kind} {what} cannot be scored here: {not_scored[kind]}",
                           f"score the log with the official {script}")
    if truth is None or (isinstance(truth, float) and math.isnan(truth)):
        return False
    if kind == "aime":
        got = aime_answer(output)
        try:
            return got is not None and int(truth) == got
        except (TypeError, ValueError):
            return False
    options = "ABCD" if kind == "gpqa" else "ABCDEFGHIJ"
    letter = choice(output, options[-1])
    truth_text = str(truth)
    if not letter or not truth_text:
        return False
    return letter in options and letter == truth_text.upper()


class ExactMatchResult(BaseModel):
    """Per data set: samples and correct ones; ``unscored``: samples of kinds not scored here."""

    samples: int
    tokens_per_sample: float
    correct: dict[str, int]
    scored: dict[str, int]
    unscored: dict[str, int]

    @property
    def exact_match(self) -> float | None:
        """The official number (percent), when every sample was scored."""
        if self.unscored:
            return None
        return 100.0 * sum(self.correct.values()) / self.samples

    @property
    def partial(self) -> float:
        """Percent correct among the scored samples only."""
        n = sum(self.scored.values())
        return 100.0 * sum(self.correct.values()) / n if n else 0.0

    def accuracy_line(self) -> str:
        """The official result line (only when complete)."""
        if self.exact_match is None:
            raise DatasetError(f"{sum(self.unscored.values())} samples were not scored "
                               f"({', '.join(self.unscored)})",
                               "score the log with the official eval_accuracy.py")
        return repr({"exact_match": self.exact_match, "tokens_per_sample": self.tokens_per_sample,
                     "num-samples": self.samples})


def score(outputs: Sequence[str], truths: Sequence[Any], datasets: Sequence[str],
          n_tokens: Sequence[int]) -> ExactMatchResult:
    """Exact match of decoded ``outputs`` against their rows' ground truth and data set."""
    if not outputs:
        raise DatasetError("nothing to score", "the accuracy log has no entries")
    correct: dict[str, int] = {}
    scored: dict[str, int] = {}
    unscored: dict[str, int] = {}
    for out, truth, ds in zip(outputs, truths, datasets, strict=True):
        kind = _kind(ds)
        if kind in NOT_SCORED:
            unscored[kind] = unscored.get(kind, 0) + 1
            continue
        scored[kind] = scored.get(kind, 0) + 1
        correct[kind] = correct.get(kind, 0) + int(is_correct(kind, out, truth))
    return ExactMatchResult(samples=len(outputs), tokens_per_sample=sum(n_tokens) / len(outputs),
                            correct=correct, scored=scored, unscored=unscored)


def score_log(log: Path, truths: Sequence[Any], datasets: Sequence[str], decode: Decoder,
              dtype: TokenDtype = "int32") -> ExactMatchResult:
    """Exact match of a LoadGen accuracy log (each sample's first entry; samples beyond the
    data set are left out, as the official script does)."""
    entries = [e for e in first_per_sample(read_entries(log)) if e.qsl_idx < len(truths)]
    tokens = [e.tokens(dtype) for e in entries]
    return score(decode(tokens), [truths[e.qsl_idx] for e in entries],
                 [datasets[e.qsl_idx] for e in entries], [len(t) for t in tokens])
