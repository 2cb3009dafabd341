"""TEST05 performance (rounds before v5.0): the audit ran with the round's TEST05 seeds; is its
score within the round's tolerance of the reference run's?

As ``compliance/nvidia/TEST05/verify_performance.py`` of that round reads the *summary* logs:
the last ``Scenario`` line sets the scenario; the score is the last line matching the
scenario's pattern (Offline ``Samples per second``, Server ``Completed samples per second``,
SingleStream/MultiStream the early-stopping 90th/99th percentile estimate in ns, raw); a
``Result is: INVALID`` ends the check as a failure; the scenarios must match. The band is the
round's ``[test05]`` rule (``rules.Test05Rule``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from mlharness.compliance.accuracy_check import VerificationInputError
from mlharness.compliance.performance_check import SHORT_LATENCY_LIMIT, PerformanceCheck
from mlharness.rules.model import Test05Rule

#: the official script's patterns (``re.match``: from the line's start)
_SCORE = {
    "SingleStream": r".*Early stopping 90th percentile estimate",
    "MultiStream": r".*Early stopping 99th percentile estimate",
    "Server": r"Completed samples per second",
    "Offline": r"Samples per second",
}


@dataclass
class _Summary:
    scenario: str = ""
    score: str = "0"  # as the script keeps it: the text after ": "
    invalid: bool = False
    errors: int = 0


def _read(path: Path) -> _Summary:
    if not path.is_file():
        raise VerificationInputError(f"summary log not found: {path}",
                                     hint="give a run directory with mlperf_log_summary.txt")
    out = _Summary()
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True):
        if re.match("Scenario", line):
            out.scenario = line.split(": ", 1)[1].strip()
            continue
        pattern = _SCORE.get(out.scenario)
        if pattern and re.match(pattern, line):
            out.score = line.split(": ", 1)[1].strip()
            continue
        if re.match("Result is", line) and line.split(": ", 1)[1].strip() == "INVALID":
            out.invalid = True
            return out  # the script exits here
        if re.match(r"\d+ ERROR", line):
            out.errors += int(line.split(" ", 1)[0])
    return out


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def check_test05(reference: Path, test: Path, rule: Test05Rule, round: str) -> PerformanceCheck:
    """TEST05's performance check on two ``mlperf_log_summary.txt`` files under ``rule``."""
    check = PerformanceCheck("TEST05", str(reference), str(test))
    ref = _read(reference)
    check.scenario = ref.scenario
    if ref.invalid:
        check.failure = "Reference results are invalid"
        return check
    got = _read(test)
    if got.invalid:
        check.failure = "Test results are invalid"
        return check
    for facts, role in ((ref, "reference"), (got, "test")):
        if facts.errors:
            check.notes.append(f"{facts.errors} LoadGen error(s) reported in the {role} run")
    if got.scenario != ref.scenario:
        check.failure = f"scenarios differ (reference {ref.scenario}, test {got.scenario})"
        return check
    ref_score, test_score = _number(ref.score), _number(got.score)
    if ref_score is None or test_score is None:
        check.failure = f"unreadable score (reference {ref.score!r}, test {got.score!r})"
        return check
    check.reference_score, check.test_score = ref_score, test_score
    limit = SHORT_LATENCY_LIMIT.get(ref.scenario)
    t = rule.wide_threshold if limit is not None and ref_score <= limit else rule.threshold
    check.threshold = t
    low, high = ref_score * (1 - t), ref_score * (1 + t)
    check.notes.append(f"{round} TEST05 rule: " + (
        "inside the band" if rule.two_sided else
        "throughput not below the band, latency not above it"))
    if rule.two_sided:
        check.low, check.high = low, high
        ok = low < test_score < high
    elif ref.scenario in rule.throughput_scenarios:
        check.low, check.high = low, float("inf")
        ok = test_score > low
    elif "Stream" in ref.scenario:
        check.low, check.high = None, high
        ok = test_score < high
    else:
        check.failure = f"Test score invalid ({round}'s script has no passing rule for {ref.scenario})"
        return check
    if not ok:
        check.failure = (f"Test score invalid: {test_score:.6g} outside the allowed band "
                         f"[{'-inf' if check.low is None else f'{check.low:.6g}'}, {check.high:.6g}]")
    return check
