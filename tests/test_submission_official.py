"""Reading and explaining the official checker's output (no subprocess here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlharness.errors import ConfigError
from mlharness.submission.official import checker_dir, explain, parse_output

OUTPUT = """\
[2026-11-22 02:06:21,300 performance_check.py:381 ERROR] /r/perf/mlperf_log_detail.txt Test duration less than 600s in user config. expected=600000, found=2000
[2026-11-22 02:06:21,300 base.py:37 WARNING] Execution of check endpoints_model_check skipped for /r/perf.
[2026-11-22 02:06:21,300 base.py:58 ERROR] Some performance checks Checks failed for: /r/perf/mlperf_log_detail.txt
[2026-11-22 02:06:21,301 accuracy_check.py:162 WARNING] /r/acc/mlperf_log_detail.txt accuracy not met: expected=75.695400, found=0.100
[2026-11-22 02:06:21,301 base.py:58 ERROR] Some accuracy checks Checks failed for: /r/acc/mlperf_log_detail.txt
ERROR:main:/r/x accurcy run does not cover all dataset, accuracy samples: 450, dataset size: 50000
[2026-11-22 02:06:21,303 main.py:236 ERROR] NoResults /r/perf/mlperf_log_detail.txt
[2026-11-22 02:06:21,323 main.py:361 ERROR] SUMMARY: submission has errors
"""


def test_errors_are_explained_and_noise_dropped():
    problems, warnings, ok = parse_output(OUTPUT)
    assert [p.code for p in problems] == ["test-duration", "accuracy-coverage", "accuracy-below-target"]
    assert all(p.meaning and p.fix for p in problems)
    assert not ok
    assert any("accuracy not met" in w for w in warnings)


def test_success_and_crash():
    assert parse_output("[t main.py:1 INFO] SUMMARY: submission looks OK\n") == ([], [], True)
    crash = "Traceback (most recent call last):\n  File x\nTypeError: 'NoneType' object is not iterable\n"
    problems, _, ok = parse_output(crash)
    assert [p.code for p in problems] == ["checker-crashed"] and not ok


def test_unknown_messages_are_kept_verbatim():
    assert explain("something new").code == "official"


def test_checker_dir(tmp_path: Path):
    (tmp_path / "tools" / "submission" / "submission_checker").mkdir(parents=True)
    (tmp_path / "tools" / "submission" / "submission_checker" / "main.py").write_text("")
    assert checker_dir(tmp_path) == tmp_path / "tools" / "submission"
    with pytest.raises(ConfigError):
        checker_dir(tmp_path / "tools")
