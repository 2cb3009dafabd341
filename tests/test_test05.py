"""TEST05 verdicts equal each round's own compliance/nvidia/TEST05/verify_performance.py on
synthetic summary logs: every round before v5.0, every scenario, scores around each band edge."""

from __future__ import annotations

from pathlib import Path

import pytest

import referee
from mlharness import rules
from mlharness.compliance.test05 import check_test05

OLD_ROUNDS = tuple(n for n in rules.ROUNDS if rules.load(n).test05 is not None)
SCORE_LINE = {
    "Offline": "Samples per second",
    "Server": "Completed samples per second",
    "SingleStream": "Early stopping 90th percentile estimate",
    "MultiStream": "Early stopping 99th percentile estimate",
}
#: reference scores: a throughput, and latencies on both sides of the 20% limits
REFERENCE = {"Offline": 1000.0, "Server": 1000.0, "SingleStream": 150000.0,
             "MultiStream": 5000000.0}
RATIOS = (0.5, 0.9, 0.97, 1.0, 1.03, 1.1, 2.0)


def _summary(path: Path, scenario: str, score: float, valid: bool = True) -> Path:
    path.write_text("================================================\n"
                    "MLPerf Results Summary\n"
                    "================================================\n"
                    "SUT name : PySUT\n"
                    f"Scenario : {scenario}\n"
                    "Mode     : PerformanceOnly\n"
                    f"{SCORE_LINE[scenario]}: {score}\n"
                    f"Result is : {'VALID' if valid else 'INVALID'}\n")
    return path


def _official(name: str, ref: Path, test: Path) -> bool:
    script = referee.round_dir(name, "compliance/nvidia/TEST05/verify_performance.py") \
        / "compliance/nvidia/TEST05/verify_performance.py"
    proc = referee.python(str(script), "-r", str(ref), "-t", str(test), check=False)
    return "TEST PASS" in proc.stdout


def test_rules_name_the_round_scripts():
    assert OLD_ROUNDS == ("v4.1", "v4.0", "v3.1", "v3.0", "v2.1")


@pytest.mark.parametrize("name", OLD_ROUNDS)
def test_verdicts_equal_the_rounds_script(name: str, tmp_path: Path):
    rule = rules.load(name).test05
    assert rule is not None
    differ, cases = [], 0
    for scenario, ref_score in REFERENCE.items():
        ref = _summary(tmp_path / f"ref-{scenario}.txt", scenario, ref_score)
        tests = [(r, _summary(tmp_path / f"t-{scenario}-{r}.txt", scenario, ref_score * r))
                 for r in RATIOS]
        tests.append(("invalid", _summary(tmp_path / f"t-{scenario}-x.txt", scenario, ref_score,
                                          valid=False)))
        for label, test in tests:
            cases += 1
            ours = check_test05(ref, test, rule, name).passed
            if ours != _official(name, ref, test):
                differ.append((scenario, label, ours))
    assert cases == 4 * (len(RATIOS) + 1) and differ == []
