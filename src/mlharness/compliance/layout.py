"""Where verification reads its logs and where it puts its results.

Inputs may be our run directories (LoadGen logs at the top) or a scenario directory of a
submission tree (``performance/run_1/`` and ``accuracy/``). Outputs follow
``compliance/TEST01/run_verification.py`` and ``compliance/TEST04/run_verification.py``:
``<out>/TEST01/{verify_accuracy.txt, verify_performance.txt, accuracy/mlperf_log_accuracy.json,
performance/run_1/mlperf_log_{summary,detail}.txt}`` and
``<out>/TEST04/{verify_performance.txt, performance/run_1/mlperf_log_{summary,detail}.txt}``;
the LLM tests' as their scripts: ``TEST06/{verify_accuracy.txt, accuracy/mlperf_log_accuracy.json}``,
``TEST07`` (``verify_accuracy.txt``) and ``TEST09`` (``verify_output_len.txt``) with the accuracy
log and ``performance/run_1/``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from mlharness.compliance.accuracy_check import VerificationInputError
from mlharness.files import write_text_atomic
from mlharness.owned import replace_owned

DETAIL = "mlperf_log_detail.txt"
SUMMARY = "mlperf_log_summary.txt"
ACCURACY = "mlperf_log_accuracy.json"


def performance_logs(run_dir: Path) -> Path:
    """The directory holding a performance run's detail and summary logs."""
    for candidate in (run_dir, run_dir / "performance" / "run_1"):
        if (candidate / DETAIL).is_file():
            return candidate
    raise VerificationInputError(
        f"no {DETAIL} in {run_dir} or {run_dir / 'performance' / 'run_1'}",
        hint="give the directory of a finished performance run")


def accuracy_log(run_dir: Path) -> Path:
    """A run's ``mlperf_log_accuracy.json`` (our run dir, or ``accuracy/`` of a results dir)."""
    for candidate in (run_dir / ACCURACY, run_dir / "accuracy" / ACCURACY):
        if candidate.is_file():
            return candidate
    raise VerificationInputError(
        f"no {ACCURACY} in {run_dir} or {run_dir / 'accuracy'}",
        hint="give the directory of a finished accuracy-mode run")


#: every file a verification writes in a TEST0X directory (paths inside it; TEST01's score
#: fallback adds the two accuracy texts): ``--force`` replaces a directory holding only these
VERIFICATION_NAMES = ("verify_*.txt", f"performance/run_1/{SUMMARY}",
                      f"performance/run_1/{DETAIL}", f"accuracy/{ACCURACY}",
                      "accuracy/baseline_accuracy.txt", "accuracy/compliance_accuracy.txt")


def prepare_output(out_dir: Path, test: str, overwrite: bool,
                   with_performance: bool = True) -> Path:
    """Create ``<out_dir>/<test>``; refuse to replace an earlier verification unless asked."""
    test_dir = out_dir / test
    if test_dir.exists() and any(test_dir.iterdir()) and not overwrite:
        raise VerificationInputError(
            f"{test_dir} already holds a verification",
            hint="choose another --output, or pass --force to replace it")
    # only a directory shaped like a verification (nothing else in it) is ever deleted
    replace_owned(test_dir, "verification", VERIFICATION_NAMES, "--output", overwrite,
                  marked=False)
    if with_performance:
        (test_dir / "performance" / "run_1").mkdir(parents=True, exist_ok=True)
    else:
        test_dir.mkdir(parents=True, exist_ok=True)
    return test_dir


def write_outputs(test_dir: Path, audit_logs: Path, texts: dict[str, str],
                  with_accuracy_log: bool, with_performance: bool = True) -> None:
    """Write the verify_*.txt files and copy the audit run's logs into the official places."""
    for name, text in texts.items():
        write_text_atomic(test_dir / name, text)
    perf = test_dir / "performance" / "run_1"
    for name in (SUMMARY, DETAIL) if with_performance else ():
        shutil.copy2(audit_logs / name, perf / name)
    if with_accuracy_log:
        (test_dir / "accuracy").mkdir(exist_ok=True)
        shutil.copy2(audit_logs / ACCURACY, test_dir / "accuracy" / ACCURACY)
