"""TEST07, accuracy in performance mode (gpt-oss-120b), judged as
compliance/TEST07/run_verification.py does.

The audit run logs the outputs of the GPQA compliance set (``acc_eval_compliance_gpqa``, the
gpt-oss-120b README); the official script runs an accuracy command on that log, reads the first
``'exact_match': N`` it prints and passes when N (the printed value, 3 decimals) reaches the
threshold (``test07_accuracy_threshold`` of the test's audit.config: 60.698). GPQA needs no
code execution, so :mod:`mlharness.llm.gpt_oss_accuracy` can be that command here.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

RULE = "=" * 80
SCORE = re.compile(r"'exact_match':\s*([\d.]+)")  # the official default --score-pattern


class Test07Result(BaseModel):
    """The score read from the accuracy output (None: none printed) and the verdict."""

    accuracy_output: str
    threshold: float

    @property
    def score(self) -> float | None:
        m = SCORE.search(self.accuracy_output)
        return float(m.group(1)) if m else None

    @property
    def passed(self) -> bool:
        return self.score is not None and self.score >= self.threshold

    def summary(self) -> str:
        """The official summary block appended to ``verify_accuracy.txt``."""
        head = f"\n{RULE}\nTEST07 Verification Summary\n{RULE}\n"
        if self.score is None:
            return head + "Error: Could not parse accuracy score\nTEST FAIL\n"
        verdict = "TEST PASS" if self.passed else "TEST FAIL"
        return (head + f"Accuracy score: {self.score}\nAccuracy threshold: {self.threshold}\n"
                f"Accuracy check pass: {self.passed}\n{verdict}\n")

    def verify_accuracy_txt(self) -> str:
        """The official ``TEST07/verify_accuracy.txt``: the accuracy output, then the summary."""
        return self.accuracy_output + self.summary()


def verify(accuracy_output: str, threshold: float) -> Test07Result:
    """TEST07's verdict on the text an accuracy command printed for the audit run's log (e.g.
    ``GptOssResult.accuracy_line()``)."""
    return Test07Result(accuracy_output=accuracy_output, threshold=threshold)
