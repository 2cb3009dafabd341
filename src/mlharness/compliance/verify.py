"""Verify an audit run against the reference runs and lay the results out officially.

``verify`` decides as ``compliance/TEST01/run_verification.py`` and
``compliance/TEST04/run_verification.py`` do (TEST01: accuracy on the untruncated accuracy log
plus performance on the detail logs; TEST04: performance on the summary logs; TEST05, rounds
before v5.0: the round's ``compliance/nvidia/TEST05`` band on the summary logs), then writes
``verify_*.txt`` and copies the audit's logs under ``<out_dir>/<test>/``. The LLM tests (TEST06,
TEST07, TEST09) judge the audit's accuracy log alone: ``compliance.llm_verify``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness import rules
from mlharness.compliance.accuracy_check import (
    AccuracyCheck, VerificationInputError, compare_accuracy_logs, official_dtype,
)
from mlharness.compliance.accuracy_delta import AccuracyDelta, accuracy_delta
from mlharness.compliance.audit_checks import (
    check_audit_applied, check_not_audit, check_same_benchmark, record_of, record_or_none,
    run_notes, task_of_run, test05_round,
)
from mlharness.compliance.audit_config import LLM_TESTS, TESTS
from mlharness.compliance.layout import (
    ACCURACY, DETAIL, SUMMARY, accuracy_log, performance_logs, prepare_output, write_outputs,
)
from mlharness.compliance.llm_verify import LlmVerdict, verify_llm
from mlharness.compliance.logs import read_detail
from mlharness.compliance.performance_check import (
    PerformanceCheck, check_detail_logs, check_summary_logs,
)
from mlharness.compliance.test05 import check_test05
from mlharness.errors import HarnessError


@dataclass
class Verdict:
    """The outcome of one compliance test."""

    test: str
    output_dir: Path  # <out>/<test>
    audit_run: Path
    reference_performance: Path
    performance: PerformanceCheck
    accuracy: AccuracyCheck | None = None
    reference_accuracy: Path | None = None
    accuracy_delta: AccuracyDelta | None = None  # TEST01 when the responses are not bit-exact
    notes: list[str] = field(default_factory=list)

    @property
    def accuracy_passed(self) -> bool:
        if self.accuracy is None or self.accuracy.passed:
            return True
        return self.accuracy_delta is not None and self.accuracy_delta.passed

    @property
    def passed(self) -> bool:
        return self.performance.passed and self.accuracy_passed

    def to_dict(self) -> dict[str, Any]:
        return {
            "test": self.test, "passed": self.passed, "output_dir": str(self.output_dir),
            "audit_run": str(self.audit_run),
            "reference_performance": str(self.reference_performance),
            "reference_accuracy": str(self.reference_accuracy) if self.reference_accuracy else None,
            "performance": self.performance.to_dict(),
            "accuracy": self.accuracy.to_dict() if self.accuracy else None,
            "accuracy_delta": self.accuracy_delta.to_dict() if self.accuracy_delta else None,
            "notes": list(self.notes),
        }


def _check_accuracy_mode(reference_accuracy: Path) -> None:
    detail = reference_accuracy.parent / DETAIL
    if detail.is_file():
        mode = read_detail(detail).get("effective_test_mode")
        if mode != "AccuracyOnly":
            raise VerificationInputError(
                f"{reference_accuracy.parent} is a {mode} run, not an accuracy run",
                hint="give --reference-accuracy the run dir of a --mode accuracy run")


def response_dtype_of(run_dir: Path) -> str:
    """The benchmark's response element type, from the run's ``run.json`` (or its task)."""
    record = record_of(run_dir)
    dtype = record.task.get("response_dtype")  # the task's own description in run.json
    if dtype:
        return str(dtype)
    try:
        return task_of_run(run_dir).response_dtype
    except HarnessError as exc:
        raise VerificationInputError(
            f"cannot tell the response type of {record.benchmark}: {exc.message}",
            hint="pass --dtype (byte, float32, int32 or int64)") from exc


def _score_fallback(verdict: Verdict, audit_logs: Path) -> None:
    """TEST01 Part III: score both sides when the responses are not bit-exact."""
    try:
        task = task_of_run(verdict.audit_run)
        benchmark = record_of(verdict.audit_run).benchmark
    except HarnessError as exc:
        verdict.notes.append(f"accuracy-delta check skipped: {exc.message}")
        return
    assert verdict.reference_accuracy is not None
    verdict.accuracy_delta = accuracy_delta(
        task, benchmark, verdict.reference_accuracy, audit_logs / ACCURACY,
        verdict.output_dir / "accuracy")


def verify(test: str, reference_perf_run_dir: Path | None,
           reference_accuracy_run_dir: Path | None, audit_run_dir: Path, out_dir: Path,
           dtype: str | None = None, overwrite: bool = False, score_fallback: bool = True,
           eos_token_id: int | None = None) -> Verdict | LlmVerdict:
    """Verify ``audit_run_dir`` (a run made with ``test``'s audit.config) and write
    ``<out_dir>/<test>/``. ``dtype`` is the official ``--dtype`` (byte, float32, int32, int64);
    by default the benchmark's response type. Raises VerificationInputError on missing or
    unreadable inputs; a failed test is a Verdict with ``passed == False``.

    When TEST01's responses are not bit-exact and ``score_fallback`` is set, both sides are
    scored with the benchmark's metric (``accuracy/{baseline,compliance}_accuracy.txt``), which
    the submission checker accepts within 1% (0.1% for 99.9 benchmarks).

    TEST06/TEST07/TEST09 need no reference run (given, it must be an ordinary performance run of
    the same benchmark); ``eos_token_id`` is TEST06's (default: the audit's tokenizer's, else the
    official 2)."""
    if test not in TESTS:
        raise VerificationInputError(f"unknown compliance test {test!r}",
                                     hint="choose one of: " + ", ".join(TESTS))
    if test in LLM_TESTS:
        return verify_llm(test, audit_run_dir, out_dir, reference_perf_run_dir,
                          overwrite=overwrite, eos_token_id=eos_token_id)
    if reference_perf_run_dir is None:
        raise VerificationInputError(f"{test} compares the audit with the reference run",
                                     hint="pass --reference-perf RUN_DIR")
    reference_perf_run_dir = Path(reference_perf_run_dir).resolve()
    audit_run_dir = Path(audit_run_dir).resolve()
    if reference_accuracy_run_dir is not None:
        reference_accuracy_run_dir = Path(reference_accuracy_run_dir).resolve()
    if test == "TEST01" and reference_accuracy_run_dir is None:
        raise VerificationInputError("TEST01 needs the accuracy run",
                                     hint="pass --reference-accuracy RUN_DIR")
    audit_logs = performance_logs(audit_run_dir)
    ref_logs = performance_logs(reference_perf_run_dir)
    check_audit_applied(test, audit_logs)
    check_not_audit(ref_logs)
    check_same_benchmark(reference_perf_run_dir, audit_run_dir)
    accuracy = ref_acc = None
    texts: dict[str, str] = {}
    if test == "TEST01":
        assert reference_accuracy_run_dir is not None
        ref_acc = accuracy_log(reference_accuracy_run_dir)
        _check_accuracy_mode(ref_acc)
        dtype = dtype or official_dtype(response_dtype_of(audit_run_dir))
        accuracy = compare_accuracy_logs(ref_acc, audit_logs / ACCURACY, dtype)
        performance = check_detail_logs(ref_logs / DETAIL, audit_logs / DETAIL)
        texts["verify_accuracy.txt"] = accuracy.render()
    elif test == "TEST05":
        round_name = test05_round(read_detail(audit_logs / DETAIL))
        assert round_name is not None  # _check_audit_applied
        rule = rules.load(round_name).test05
        assert rule is not None
        performance = check_test05(ref_logs / SUMMARY, audit_logs / SUMMARY, rule, round_name)
    else:
        performance = check_summary_logs(ref_logs / SUMMARY, audit_logs / SUMMARY)
    texts["verify_performance.txt"] = performance.render()
    test_dir = prepare_output(Path(out_dir), test, overwrite)
    write_outputs(test_dir, audit_logs, texts, with_accuracy_log=test == "TEST01")
    verdict = Verdict(test, test_dir, audit_run_dir, reference_perf_run_dir, performance,
                      accuracy, ref_acc)
    if accuracy is not None and not accuracy.passed and score_fallback and accuracy.matched:
        _score_fallback(verdict, audit_logs)
    verdict.notes += run_notes(reference_perf_run_dir, "reference run")
    verdict.notes += run_notes(audit_run_dir, "audit run")
    audit = record_or_none(audit_run_dir)
    if audit is not None and not audit.spec.valid:
        verdict.notes.append("--test length audit: fine for checking; a submission needs "
                             "full-length (--valid) reference runs and audits")
    return verdict
