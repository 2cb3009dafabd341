"""TEST01 and TEST04 performance: is the audit run's score within the allowed band of the
reference performance run's?

Rules (facts, from the official scripts):

* TEST01 (``compliance/TEST01/verify_performance.py``) reads the *detail* logs: both runs VALID
  and free of LoadGen errors, same scenario, same Server target latency, and the score (Offline
  samples/s, Server completed samples/s, SingleStream/MultiStream early-stopping latency in ns)
  within +-10% of the reference; +-20% when the reference SingleStream latency is <= 200000 ns
  or the MultiStream latency is <= 1600000 ns.
* TEST04 (``compliance/TEST04/verify_performance.py``) reads the *summary* logs: both VALID, same
  scenario, and the score (throughput; 1e9 / latency estimate for SingleStream/MultiStream) must
  stay *below* reference * 1.10 — a SUT that caches repeated samples is faster than that. The
  wider 1.20 factor applies when that reference score is <= 200000 (SingleStream) or <= 1600000
  (MultiStream), which the official script compares against the inverted latency. It does not
  compare Server target latencies (its pattern never matches the summary line), nor do we.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.compliance.logs import DETAIL_SCORE_KEY, DetailFacts, read_detail, read_summary

NARROW, WIDE = 0.10, 0.20
SHORT_LATENCY_LIMIT = {"SingleStream": 200000.0, "MultiStream": 1600000.0}


@dataclass
class PerformanceCheck:
    """One verify_performance outcome; ``failure`` is None when the test passes."""

    test: str
    reference_log: str
    test_log: str
    scenario: str = ""
    reference_score: float | None = None
    test_score: float | None = None
    threshold: float | None = None
    low: float | None = None  # None: no lower bound (TEST04)
    high: float | None = None
    failure: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.failure is None

    @property
    def ratio(self) -> float | None:
        if self.reference_score and self.test_score is not None:
            return self.test_score / self.reference_score
        return None

    def render(self) -> str:
        """verify_performance.txt: our facts, then ``TEST PASS`` or ``TEST FAIL: <reason>``."""
        source = "detail" if self.test == "TEST01" else "summary"
        lines = [f"mlharness {self.test} performance verification ({source} logs)",
                 f"reference log  : {self.reference_log}",
                 f"test log       : {self.test_log}"]
        if self.scenario:
            lines.append(f"scenario       : {self.scenario}")
        if self.reference_score is not None:
            lines.append(f"reference score: {self.reference_score}")
        if self.test_score is not None:
            lines.append(f"test score     : {self.test_score}")
        if self.threshold is not None:
            low = "-inf" if self.low is None else f"{self.low:.6g}"
            lines.append(f"allowed band   : [{low}, {self.high:.6g}] "
                         f"(threshold {self.threshold:.0%})")
        lines += [f"note: {n}" for n in self.notes]
        lines.append("TEST PASS" if self.passed else f"TEST FAIL: {self.failure}")
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "failure": self.failure, "scenario": self.scenario,
                "reference_score": self.reference_score, "test_score": self.test_score,
                "threshold": self.threshold, "low": self.low, "high": self.high,
                "ratio": self.ratio}


def _threshold(scenario: str, reference_score: float) -> float:
    limit = SHORT_LATENCY_LIMIT.get(scenario)
    return WIDE if limit is not None and reference_score <= limit else NARROW


def _detail_problem(facts: DetailFacts, role: str) -> str | None:
    if facts.get("result_validity") != "VALID":
        return f"{role} run is not VALID"
    if facts.num_errors:
        return f"{role} run logged {facts.num_errors} LoadGen error(s)"
    return None


def check_detail_logs(reference: Path, test: Path) -> PerformanceCheck:
    """TEST01's performance check on two ``mlperf_log_detail.txt`` files."""
    check = PerformanceCheck("TEST01", str(reference), str(test))
    scores = []
    for facts, role in ((read_detail(reference), "reference"), (read_detail(test), "test")):
        scenario = facts.get("effective_scenario")
        check.scenario = check.scenario or str(scenario or "")
        key = DETAIL_SCORE_KEY.get(scenario)
        try:
            score = float(facts.get(key))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            check.failure = f"{role} log has no score for scenario {scenario!r}"
            return check
        scores.append((scenario, score, facts.get("effective_target_latency_ns")))
        check.failure = _detail_problem(facts, role)
        if check.failure:
            return check
    (ref_scenario, ref_score, ref_target), (test_scenario, test_score, test_target) = scores
    check.scenario = ref_scenario
    if test_scenario != ref_scenario:
        check.failure = f"scenarios differ (reference {ref_scenario}, test {test_scenario})"
        return check
    if ref_scenario == "Server" and ref_target != test_target:
        check.failure = (f"Server target latency differs (reference {ref_target} ns, "
                         f"test {test_target} ns)")
        return check
    check.reference_score, check.test_score = ref_score, test_score
    check.threshold = _threshold(ref_scenario, ref_score)
    check.low = ref_score * (1 - check.threshold)
    check.high = ref_score * (1 + check.threshold)
    if not check.low <= test_score <= check.high:
        check.failure = (f"test score {test_score:.6g} is outside the allowed band "
                         f"[{check.low:.6g}, {check.high:.6g}]")
    return check


def check_summary_logs(reference: Path, test: Path) -> PerformanceCheck:
    """TEST04's performance check on two ``mlperf_log_summary.txt`` files."""
    check = PerformanceCheck("TEST04", str(reference), str(test))
    ref = read_summary(reference)
    check.scenario = ref.scenario
    if ref.unreadable:
        check.failure = f"unreadable score line in the reference summary: {ref.unreadable!r}"
        return check
    if ref.valid is False:
        check.failure = "reference run is INVALID"
        return check
    got = read_summary(test)
    if got.unreadable:
        check.failure = f"unreadable score line in the test summary: {got.unreadable!r}"
        return check
    if got.valid is False:
        check.failure = "test run is INVALID"
        return check
    for facts, role in ((ref, "reference"), (got, "test")):
        if facts.errors:
            check.notes.append(f"{facts.errors} LoadGen error(s) reported in the {role} run")
    check.scenario = ref.scenario
    if got.scenario != ref.scenario:
        check.failure = f"scenarios differ (reference {ref.scenario}, test {got.scenario})"
        return check
    check.reference_score, check.test_score = ref.score, got.score
    check.threshold = _threshold(ref.scenario, ref.score)
    check.high = ref.score * (1 + check.threshold)
    if ref.scenario in SHORT_LATENCY_LIMIT:
        check.notes.append("SingleStream/MultiStream scores are 1e9 / early-stopping latency (ns)")
    if not got.score < check.high:
        check.failure = (f"test score {got.score:.6g} is not below {check.high:.6g}: the run "
                         "with one repeated sample was faster than allowed (caching?)")
    return check
