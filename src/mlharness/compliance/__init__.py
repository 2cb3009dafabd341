"""Compliance audits TEST01 and TEST04: official audit.config values, audit runs, verification.

Typical use (what ``mlharness compliance`` and the submission flow do)::

    record = run_audit("TEST04", reference_spec, output_dir=Path("runs"))
    verdict = verify("TEST04", reference_perf_dir, None, record.run_dir, out_dir)
    verdict.passed  # and out_dir/TEST04/verify_performance.txt says TEST PASS / TEST FAIL
"""

from mlharness.compliance.accuracy_check import (
    AccuracyCheck, VerificationInputError, compare_accuracy_logs, official_dtype,
)
from mlharness.compliance.audit_config import TESTS, AuditConfig, audit_config
from mlharness.compliance.audit_run import run_audit
from mlharness.compliance.performance_check import (
    PerformanceCheck, check_detail_logs, check_summary_logs,
)
from mlharness.compliance.required import required_tests
from mlharness.compliance.verify import Verdict, verify

__all__ = [
    "TESTS", "AccuracyCheck", "AuditConfig", "PerformanceCheck", "Verdict",
    "VerificationInputError", "audit_config", "check_detail_logs", "check_summary_logs",
    "compare_accuracy_logs", "official_dtype", "required_tests", "run_audit", "verify",
]
