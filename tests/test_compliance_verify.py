"""TEST01/TEST04 performance verification on real LoadGen logs of the demo, in all four scenarios,
against the official verify_performance.py scripts.

Each case copies a real run's logs and edits one fact (the test score, validity, scenario, ...)
so that every rule of the band is exercised; our verdict must equal the rule and the official
script's verdict on the very same files.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from compliance_support import (
    get_detail_value, get_summary_value, official, official_passes, run_official,
    set_detail_value, set_summary_line,
)
from mlharness.compliance import check_detail_logs, check_summary_logs
from mlharness.compliance.logs import DETAIL_SCORE_KEY

SETTINGS = {
    "SingleStream": {"target_latency": 0.02},
    "MultiStream": {"target_latency": 0.05},
    "Server": {"target_qps": 300},
    "Offline": {"target_qps": 100000},
}
SUMMARY_SCORE = {
    "SingleStream": r".*Early stopping 90.0th percentile estimate",
    "MultiStream": r".*Early stopping 99.0th percentile estimate",
    "Server": r"Completed samples per second",
    "Offline": r"Samples per second",
}
LATENCY = ("SingleStream", "MultiStream")
RATIOS = (0.5, 0.85, 0.95, 1.0, 1.05, 1.15, 1.3, 2.0)


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One real performance run of the demo per scenario (the runner's child process)."""
    from mlharness.runner import execute
    from mlharness.spec import RunSpec

    root = tmp_path_factory.mktemp("runs")
    runs = {}
    for scenario, settings in SETTINGS.items():
        record = execute(RunSpec(benchmark="demo", scenario=scenario, output_dir=root, **settings))
        assert record.status == "ok", record.data.get("error")
        runs[scenario] = record.run_dir
    return runs


def pair(tmp_path: Path, run: Path, name: str) -> tuple[Path, Path]:
    """Reference and test copies of one log, VALID both (the band is what is under test)."""
    ref, test = tmp_path / f"ref_{name}", tmp_path / f"test_{name}"
    shutil.copy2(run / name, ref)
    shutil.copy2(run / name, test)
    for path in (ref, test):
        if name.endswith("detail.txt"):
            set_detail_value(path, "result_validity", "VALID")
        else:
            set_summary_line(path, r"Result is", "VALID")
    return ref, test


def band_rule_01(scenario: str, ref_latency_or_score: float, ratio: float) -> bool:
    wide = (scenario == "SingleStream" and ref_latency_or_score <= 200000) or (
        scenario == "MultiStream" and ref_latency_or_score <= 1600000)
    t = 0.2 if wide else 0.1
    return 1 - t <= ratio <= 1 + t


def band_rule_04(scenario: str, ref_score: float, ratio: float) -> bool:
    wide = (scenario == "SingleStream" and ref_score <= 200000) or (
        scenario == "MultiStream" and ref_score <= 1600000)
    return ratio < (1.2 if wide else 1.1)


def official_agrees(ours: bool, script: str, ref: Path, test: Path, cwd: Path) -> None:
    """The official script's verdict on the same files (skips without the referee; fails under
    CI=true)."""
    text = run_official(script, ["-r", str(ref), "-t", str(test)], cwd)
    assert ours == official_passes(text), text


#: (scenario, reference latency forced to 10 ms): the as-run demo latencies are short, so the
#: forced ones exercise the narrow band of SingleStream/MultiStream
BAND_CASES = [(s, False) for s in SETTINGS] + [(s, True) for s in LATENCY]


@pytest.mark.parametrize("scenario,slow_reference", BAND_CASES)
def test_test01_band(demo_runs: dict[str, Path], tmp_path: Path, scenario: str,
                     slow_reference: bool) -> None:
    key = DETAIL_SCORE_KEY[scenario]
    for ratio in RATIOS:
        (tmp_path / str(ratio)).mkdir()
        ref, test = pair(tmp_path / str(ratio), demo_runs[scenario], "mlperf_log_detail.txt")
        base = 10_000_000 if slow_reference else get_detail_value(ref, key)
        set_detail_value(ref, key, base)
        value = base * ratio
        set_detail_value(test, key, int(value) if isinstance(base, int) else value)
        check = check_detail_logs(ref, test)
        assert check.passed == band_rule_01(scenario, float(base), ratio), (ratio, check.render())
        official_agrees(check.passed, "TEST01/verify_performance.py", ref, test, ref.parent)


@pytest.mark.parametrize("scenario,slow_reference", BAND_CASES)
def test_test04_band(demo_runs: dict[str, Path], tmp_path: Path, scenario: str,
                     slow_reference: bool) -> None:
    pattern = SUMMARY_SCORE[scenario]
    for ratio in RATIOS:
        (tmp_path / str(ratio)).mkdir()
        ref, test = pair(tmp_path / str(ratio), demo_runs[scenario], "mlperf_log_summary.txt")
        base = 1e9 / 10_000_000 if slow_reference else None
        raw = float(get_summary_value(ref, pattern))
        if slow_reference:
            set_summary_line(ref, pattern, "10000000")
            raw = 10_000_000.0
        if scenario in LATENCY:  # score = 1e9 / latency: a faster run has a lower latency
            score = 1e9 / raw
            set_summary_line(test, pattern, str(int(raw / ratio)))
        else:
            score = raw
            set_summary_line(test, pattern, f"{raw * ratio:.2f}")
        check = check_summary_logs(ref, test)
        assert check.passed == band_rule_04(scenario, score, ratio), (ratio, check.render())
        assert base is None or abs(check.reference_score - base) < 1e-9
        official_agrees(check.passed, "TEST04/verify_performance.py", ref, test, ref.parent)


DEFECTS = ("test invalid", "reference invalid", "scenario differs", "loadgen error",
           "server target latency differs", "no score")


@pytest.mark.parametrize("defect", DEFECTS)
def test_test01_defects_fail_like_official(demo_runs: dict[str, Path], tmp_path: Path,
                                           defect: str) -> None:
    scenario = "Server" if "server" in defect else "SingleStream"
    ref, test = pair(tmp_path, demo_runs[scenario], "mlperf_log_detail.txt")
    if defect == "test invalid":
        set_detail_value(test, "result_validity", "INVALID")
    elif defect == "reference invalid":
        set_detail_value(ref, "result_validity", "INVALID")
    elif defect == "scenario differs":
        shutil.copy2(demo_runs["Offline"] / "mlperf_log_detail.txt", test)
        set_detail_value(test, "result_validity", "VALID")
    elif defect == "loadgen error":
        set_detail_value(test, "num_errors", 1)  # the official script stops on any error
    elif defect == "no score":
        set_detail_value(test, DETAIL_SCORE_KEY[scenario], None)
    else:
        set_detail_value(test, "effective_target_latency_ns", 20_000_000)
    check = check_detail_logs(ref, test)
    assert not check.passed and check.render().splitlines()[-1].startswith("TEST FAIL: ")
    official_agrees(False, "TEST01/verify_performance.py", ref, test, tmp_path)


@pytest.mark.parametrize("defect", ("test invalid", "reference invalid", "scenario differs",
                                    "error reported", "zero latency", "garbled score"))
def test_test04_defects_like_official(demo_runs: dict[str, Path], tmp_path: Path,
                                      defect: str) -> None:
    scenario = "SingleStream" if defect == "zero latency" else "Offline"
    ref, test = pair(tmp_path, demo_runs[scenario], "mlperf_log_summary.txt")
    expected = False
    if defect == "zero latency":  # 1e9 / 0: the official script stops
        set_summary_line(test, SUMMARY_SCORE["SingleStream"], "0")
    elif defect == "garbled score":
        set_summary_line(ref, SUMMARY_SCORE["Offline"], "n/a")
    elif defect == "test invalid":
        set_summary_line(test, r"Result is", "INVALID")
    elif defect == "reference invalid":
        set_summary_line(ref, r"Result is", "INVALID")
    elif defect == "scenario differs":
        shutil.copy2(demo_runs["SingleStream"] / "mlperf_log_summary.txt", test)
    else:  # LoadGen errors are only a warning in TEST04's summary check
        test.write_text(test.read_text() + "\n1 ERROR encountered. See detailed log.\n")
        expected = True
    check = check_summary_logs(ref, test)
    assert check.passed is expected, check.render()
    official_agrees(expected, "TEST04/verify_performance.py", ref, test, tmp_path)


def test_logs_are_real_loadgen_logs(demo_runs: dict[str, Path]) -> None:
    for scenario, run in demo_runs.items():
        assert get_detail_value(run / "mlperf_log_detail.txt", "effective_scenario") == scenario
        assert float(get_summary_value(run / "mlperf_log_summary.txt", SUMMARY_SCORE[scenario])) > 0


@official
def test_official_scripts_are_present() -> None:
    from compliance_support import OFFICIAL

    for script in ("TEST01/verify_performance.py", "TEST04/verify_performance.py",
                   "TEST01/verify_accuracy.py", "TEST01/run_verification.py",
                   "TEST04/run_verification.py"):
        assert (OFFICIAL / "compliance" / script).is_file()
