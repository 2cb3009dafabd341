"""TEST01 accuracy: do the responses logged in performance mode equal the accuracy run's?

Same decision as ``compliance/TEST01/verify_accuracy.py`` (its default, non-unix mode): for every
performance-mode entry whose ``qsl_idx`` is known, the first element of the response (read with
``--dtype``) must equal the first element of the known response; empty responses must both be
empty. A performance-mode entry also becomes the known response for its ``qsl_idx``. The test
passes when nothing differs and at least one entry matched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import HarnessError

#: ``--dtype`` choices of the official scripts and the numpy types they read (np.byte is int8)
OFFICIAL_DTYPES = {"byte": np.int8, "float32": np.float32, "int32": np.int32, "int64": np.int64}


class VerificationInputError(HarnessError):
    """A log needed for verification is missing or unreadable."""


def official_dtype(response_dtype: str) -> str:
    """The official ``--dtype`` for a task's response element type.

    One-byte types compare as ``byte`` (equal as int8 iff equal as uint8); types the official
    script does not know fall back to its default, ``byte``.
    """
    name = np.dtype(response_dtype).name
    return name if name in OFFICIAL_DTYPES else "byte"


@dataclass
class AccuracyCheck:
    """Counts of one TEST01 accuracy comparison; ``passed`` decides."""

    dtype: str
    reference_log: str
    test_log: str
    reference_entries: int = 0
    reference_duplicates: int = 0
    reference_duplicate_mismatches: int = 0
    test_entries: int = 0
    matched: int = 0
    mismatched: int = 0
    unknown: int = 0
    mismatched_examples: list[int] = field(default_factory=list)
    error: str | None = None  # a response the official script could not read either

    @property
    def passed(self) -> bool:
        return self.error is None and self.mismatched == 0 and self.matched > 0

    @property
    def reason(self) -> str:
        if self.error:
            return self.error
        if self.matched == 0:
            return "no sampled performance-mode response has a qsl_idx of the accuracy run"
        if self.mismatched:
            return (f"{self.mismatched} of {self.matched} sampled performance-mode responses "
                    "differ from the accuracy run")
        return "every sampled performance-mode response equals the accuracy run's"

    def render(self) -> str:
        """verify_accuracy.txt: our counts, then the ``TEST PASS``/``TEST FAIL`` line the
        submission checker looks for (an exact line for TEST01)."""
        lines = [
            "mlharness TEST01 accuracy verification (accuracy run vs. sampled performance run)",
            f"reference accuracy log : {self.reference_log}",
            f"test accuracy log      : {self.test_log}",
            f"dtype                  : {self.dtype}",
            f"reference entries                 : {self.reference_entries}",
            f"reference repeated qsl_idx        : {self.reference_duplicates}",
            f"reference repeats that differ     : {self.reference_duplicate_mismatches}",
            f"test entries                      : {self.test_entries}",
            f"test entries matched by qsl_idx   : {self.matched}",
            f"test entries whose data differs   : {self.mismatched}",
            f"test entries with unknown qsl_idx : {self.unknown}",
        ]
        if self.mismatched_examples:
            lines.append("first differing qsl_idx: "
                         + ", ".join(str(i) for i in self.mismatched_examples))
        lines.append(f"result: {self.reason}")
        lines.append("TEST PASS" if self.passed else "TEST FAIL")
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "reason": self.reason, "dtype": self.dtype,
                "reference_entries": self.reference_entries, "test_entries": self.test_entries,
                "matched": self.matched, "mismatched": self.mismatched, "unknown": self.unknown}


def load_accuracy_entries(path: Path, role: str) -> list[dict[str, Any]]:
    """The raw entries of an ``mlperf_log_accuracy.json``."""
    if not path.is_file():
        raise VerificationInputError(
            f"{role} accuracy log not found: {path}",
            hint="give the run directory that holds mlperf_log_accuracy.json")
    try:
        entries = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        truncated = b"\n\n...\n\n" in path.read_bytes()
        raise VerificationInputError(
            f"{role} accuracy log {path} is not valid JSON ({exc.msg})",
            hint=("it was truncated for submission; verify with the original run's log"
                  if truncated else "the run may have been cut off; re-run it"),
        ) from exc
    if not isinstance(entries, list):
        raise VerificationInputError(f"{path} is not a LoadGen accuracy log (no JSON list)",
                                     hint="give the mlperf_log_accuracy.json LoadGen wrote")
    return entries


def _first(hexdata: str, dtype: type) -> np.ndarray:
    return np.frombuffer(bytes.fromhex(hexdata), dtype)


def compare_accuracy_logs(reference: Path, test: Path, dtype: str = "byte",
                          examples: int = 5) -> AccuracyCheck:
    """Compare the accuracy run's log (``reference``, untruncated) with the audit's (``test``)."""
    if dtype not in OFFICIAL_DTYPES:
        raise VerificationInputError(f"unknown dtype {dtype!r}",
                                     hint="choose one of: " + ", ".join(OFFICIAL_DTYPES))
    np_dtype = OFFICIAL_DTYPES[dtype]
    ref_entries = load_accuracy_entries(reference, "reference")
    test_entries = load_accuracy_entries(test, "test")
    check = AccuracyCheck(dtype, str(reference), str(test), reference_entries=len(ref_entries),
                          test_entries=len(test_entries))
    known: dict[int, str] = {}
    for entry in ref_entries:
        idx, data = entry["qsl_idx"], entry["data"]
        if idx in known:
            check.reference_duplicates += 1
            check.reference_duplicate_mismatches += known[idx] != data
        else:
            known[idx] = data
    for entry in test_entries:
        idx, data = entry["qsl_idx"], entry["data"]
        if idx in known:
            check.matched += 1
            try:
                got, want = _first(data, np_dtype), _first(known[idx], np_dtype)
            except ValueError as exc:
                check.error = (f"qsl_idx {idx}: response of {len(data) // 2} bytes cannot be read "
                               f"as {dtype} ({exc}); pick the task's response dtype")
                return check
            if got.size == 0 or want.size == 0:
                differs = got.size != want.size
            else:
                differs = bool(got[0] != want[0])
            if differs:
                check.mismatched += 1
                if len(check.mismatched_examples) < examples:
                    check.mismatched_examples.append(idx)
        else:
            check.unknown += 1
        known[idx] = data
    return check
