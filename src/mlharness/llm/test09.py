"""TEST09, output token length in performance mode, verified as
compliance/TEST09/run_verification.py does (gpt-oss-120b).

Every entry of the audit run's accuracy log counts (no de-duplication): its length is the
number of whole 4-byte tokens in ``data`` (missing, empty or undecodable data counts 0), and the
mean must lie within the bounds, both inclusive (``test09_min_output_tokens`` /
``test09_max_output_tokens`` of the test's audit.config; rules: ``test09_output_tokens``).
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from mlharness.errors import DatasetError

RULE = "=" * 80


class Test09Result(BaseModel):
    """The statistics and the verdict."""

    lengths: list[int]
    min_tokens: float
    max_tokens: float

    @property
    def mean(self) -> float:
        return sum(self.lengths) / len(self.lengths)

    @property
    def std(self) -> float:
        m = self.mean
        return (sum((x - m) ** 2 for x in self.lengths) / len(self.lengths)) ** 0.5

    @property
    def min_ok(self) -> bool:
        return self.mean >= self.min_tokens

    @property
    def max_ok(self) -> bool:
        return self.mean <= self.max_tokens

    @property
    def passed(self) -> bool:
        return self.min_ok and self.max_ok

    def verify_output_len_txt(self) -> str:
        """The text of the official ``TEST09/verify_output_len.txt``."""
        verdict = "TEST PASS" if self.passed else "TEST FAIL"
        return (f"{RULE}\nTEST09: Verify Output Token Length in Performance Mode\n{RULE}\n\n"
                f"Output Token Length Statistics\n{'-' * 40}\n"
                f"Total samples: {len(self.lengths)}\nMean output tokens: {self.mean:.2f}\n"
                f"Min output tokens: {min(self.lengths)}\n"
                f"Max output tokens: {max(self.lengths)}\nStd deviation: {self.std:.2f}\n"
                f"\n{RULE}\nVerification Results\n{RULE}\n"
                f"Mean output tokens: {self.mean:.2f}\nMin threshold: {self.min_tokens}\n"
                f"Max threshold: {self.max_tokens}\nMin check pass: {self.min_ok}\n"
                f"Max check pass: {self.max_ok}\n\n{verdict}\n")


def _length(data: object) -> int:
    if not isinstance(data, str) or not data:
        return 0
    try:
        return len(bytes.fromhex(data.strip())) // 4
    except ValueError:
        return 0


def verify_log(path: Path, min_tokens: float, max_tokens: float) -> Test09Result:
    """TEST09's verdict on a run's ``mlperf_log_accuracy.json``."""
    try:
        entries = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DatasetError(f"TEST09: cannot read the accuracy log {path} ({exc})",
                           "pass the audit run's mlperf_log_accuracy.json") from exc
    if not isinstance(entries, list) or not entries:
        raise DatasetError(f"TEST09: the accuracy log {path} holds no entries",
                           "run the audit with TEST09's audit.config (it logs every sample)")
    lengths = [_length(e.get("data") if isinstance(e, dict) else None) for e in entries]
    return Test09Result(lengths=lengths, min_tokens=min_tokens, max_tokens=max_tokens)
