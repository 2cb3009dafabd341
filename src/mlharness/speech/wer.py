"""Whisper's word error rate as ``speech2text/accuracy_eval.py`` computes it: each hypothesis and
reference normalised by openai-whisper's ``EnglishTextNormalizer`` and split into words; words
aligned left to right, where a run of up to three words on one side that joins into the single
word facing it counts as one match (``helpers.compute_wer_with_concatenation``); the errors of a
clip are the Levenshtein distance between the aligned lists, its words the reference's; WER is
errors over words summed across clips, and the script prints ``Word Error Rate: W%,
accuracy=A%`` (A = 100 - W)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from mlharness.errors import ConfigError, DatasetError

#: how many words may join into one on either side of an alignment (helpers.py: ``range(1, 4)``)
MAX_JOINED = 3
_normaliser: Callable[[str], str] | None = None


def normaliser() -> Callable[[str], str]:
    """openai-whisper's English normaliser, loaded once (its spelling table ships with it: no
    network)."""
    global _normaliser
    if _normaliser is None:
        try:
            from whisper.normalizers import EnglishTextNormalizer
        except ImportError as exc:
            raise ConfigError(f"whisper's accuracy needs openai-whisper's normaliser ({exc})",
                              "pip install 'mlharness[whisper]' and then "
                              "pip install --no-deps openai-whisper==20250625 (docs/whisper.md)") \
                from exc
        _normaliser = EnglishTextNormalizer()
    return _normaliser


def levenshtein(a: Sequence[str], b: Sequence[str]) -> int:
    """Edits (insertions, deletions, substitutions) turning ``a`` into ``b``."""
    if len(a) > len(b):
        a, b = b, a
    row = list(range(len(a) + 1))
    for i, y in enumerate(b, 1):
        prev, row = row, [i] + [0] * len(a)
        for j, x in enumerate(a, 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (x != y))
    return row[-1]


def _joined_match(ref: Sequence[str], hyp: Sequence[str], i: int, j: int) -> tuple[int, int]:
    """How many reference and hypothesis words, from ``i`` and ``j``, align as one: ``k`` of
    one side that join into the other's single word (the reference side tried first for each
    ``k``), else one against one (a substitution)."""
    for k in range(1, MAX_JOINED + 1):
        if i + k <= len(ref) and "".join(ref[i:i + k]) == hyp[j]:
            return k, 1
        if j + k <= len(hyp) and "".join(hyp[j:j + k]) == ref[i]:
            return 1, k
    return 1, 1


def clip_errors(hyp: Sequence[str], ref: Sequence[str]) -> tuple[int, int]:
    """(errors, reference words) of one clip's word lists."""
    ref_aligned: list[str] = []
    hyp_aligned: list[str] = []
    i = j = 0
    while i < len(ref) and j < len(hyp):
        di, dj = (1, 1) if ref[i] == hyp[j] else _joined_match(ref, hyp, i, j)
        ref_aligned.append("".join(ref[i:i + di]))
        hyp_aligned.append("".join(hyp[j:j + dj]))
        i, j = i + di, j + dj
    ref_aligned.extend(ref[i:])
    hyp_aligned.extend(hyp[j:])
    return levenshtein(ref_aligned, hyp_aligned), len(ref)


@dataclass(frozen=True)
class WordErrorRate:
    """Errors and reference words over the scored clips."""

    errors: int
    words: int
    clips: int

    @property
    def wer(self) -> float:
        """The fraction (accuracy_eval.py's ``wer``)."""
        return self.errors / self.words

    def accuracy_line(self) -> str:
        """The line accuracy_eval.py prints (the checker reads ``accuracy=``)."""
        wer = self.wer
        return f"Word Error Rate: {wer * 100}%, accuracy={(1 - wer) * 100}%"


def word_error_rate(hypotheses: Sequence[str], references: Sequence[str]) -> WordErrorRate:
    """WER of transcripts against references, clip by clip in order."""
    if len(hypotheses) != len(references):
        raise DatasetError(f"{len(hypotheses)} transcripts for {len(references)} references",
                           "each accuracy-log entry needs its manifest clip")
    norm = normaliser()
    errors = words = 0
    for hyp, ref in zip(hypotheses, references):
        e, w = clip_errors(norm(hyp).split(), norm(ref).split())
        errors, words = errors + e, words + w
    if words == 0:
        raise DatasetError("the references hold no words: WER is undefined",
                           "is the manifest's transcript field empty?")
    return WordErrorRate(errors=errors, words=words, clips=len(references))
