"""Token accuracy logs written by the real LoadGen (a token-streaming SUT in a child process):
our reader and TEST06 verification read them, with the official run_verification.py's verdicts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import referee

from mlharness.llm import test06
from mlharness.llm.accuracy_log import first_per_sample, read_entries

HERE = Path(__file__).resolve().parent
SCRIPT = "compliance/TEST06/run_verification.py"


def _loadgen_log(tmp_path: Path, scenario: str, fault: str) -> Path:
    out = tmp_path / f"{scenario}-{fault}"
    out.mkdir()
    proc = subprocess.run([sys.executable, str(HERE / "llm_loadgen_tokens.py"), str(out),
                           scenario, fault], check=False, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def test_reader_reads_what_loadgen_writes(tmp_path):
    entries = read_entries(_loadgen_log(tmp_path, "Server", "none") / "mlperf_log_accuracy.json")
    assert sorted(e.qsl_idx for e in first_per_sample(entries)) == list(range(6))
    for e in entries:
        assert e.tokens("int32").tolist() == [100 + e.qsl_idx, 7, 8, 2]
        assert e.first_tokens("int32").tolist() == [100 + e.qsl_idx] and e.token_count == 4
    off = read_entries(_loadgen_log(tmp_path, "Offline", "none") / "mlperf_log_accuracy.json")
    assert all(e.token_data is None and e.token_count == 4 for e in off)


@referee.official(SCRIPT, python=True)
@pytest.mark.parametrize(("scenario", "fault"), [
    ("Server", "none"), ("Server", "eos"), ("Server", "count"), ("Server", "first"),
    ("Offline", "none"), ("Offline", "eos"),
])
def test_test06_on_loadgen_logs_equals_the_official_script(tmp_path, scenario, fault):
    run_dir = _loadgen_log(tmp_path, scenario, fault)
    ours = test06.verify_log(run_dir / "mlperf_log_accuracy.json", scenario, eos_token_id=2)
    proc = referee.run(SCRIPT, "-c", str(run_dir), "-o", str(tmp_path / "out"), "-s", scenario)
    assert proc.returncode == 0, proc.stderr[-2000:]
    official = (tmp_path / "out" / "TEST06" / "verify_accuracy.txt").read_text()
    assert ours.verify_accuracy_txt() == official
    assert ours.passed == (fault == "none")
