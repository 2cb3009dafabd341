"""Compliance audits TEST01 and TEST04: official audit.config values, audit runs, verification.

Typical use (what ``mlharness compliance`` and the submission flow do)::

    verdict = run_compliance("TEST01", perf_run_dir, accuracy_run_dir, out_dir)
    verdict.passed  # out_dir/TEST01/verify_*.txt say TEST PASS / TEST FAIL

or in two steps: ``run_audit(test, spec_of_run(perf_run_dir), runs_dir)`` then
``verify(test, perf_run_dir, accuracy_run_dir, audit_record.run_dir, out_dir)``.
"""

from mlharness.compliance.accuracy_check import (
    AccuracyCheck, VerificationInputError, compare_accuracy_logs, official_dtype,
)
from mlharness.compliance.audit_config import TESTS, AuditConfig, audit_config
from mlharness.compliance.audit_run import run_audit, run_compliance, spec_of_run
from mlharness.compliance.performance_check import (
    PerformanceCheck, check_detail_logs, check_summary_logs,
)
from mlharness.compliance.required import required_tests
from mlharness.compliance.verify import Verdict, verify

__all__ = [
    "TESTS", "AccuracyCheck", "AuditConfig", "PerformanceCheck", "Verdict",
    "VerificationInputError", "audit_config", "check_detail_logs", "check_summary_logs",
    "compare_accuracy_logs", "official_dtype", "required_tests", "run_audit", "run_compliance",
    "spec_of_run", "verify",
]
