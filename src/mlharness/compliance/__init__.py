"""Compliance audits (TEST01, TEST04; TEST05 before v5.0; the LLMs' TEST06, TEST07, TEST09):
official audit.config values, audit runs, verification.

Typical use (what ``mlharness compliance`` and the submission flow do)::

    verdict = run_compliance("TEST01", perf_run_dir, accuracy_run_dir, out_dir)
    verdict.passed  # out_dir/TEST01/verify_*.txt say TEST PASS / TEST FAIL

or in two steps: ``run_audit(test, spec_of_run(perf_run_dir), runs_dir)`` then
``verify(test, perf_run_dir, accuracy_run_dir, audit_record.run_dir, out_dir)``.
"""

from mlharness.compliance.accuracy_check import (
    AccuracyCheck, VerificationInputError, compare_accuracy_logs, official_dtype,
)
from mlharness.compliance.audit_config import LLM_TESTS, TESTS, AuditConfig, audit_config
from mlharness.compliance.audit_run import run_audit, run_compliance, spec_of_run
from mlharness.compliance.llm_verify import LlmCheck, LlmVerdict, verify_llm
from mlharness.compliance.performance_check import (
    PerformanceCheck, check_detail_logs, check_summary_logs,
)
from mlharness.compliance.required import required_tests
from mlharness.compliance.verify import Verdict, verify

__all__ = [
    "LLM_TESTS", "TESTS", "AccuracyCheck", "AuditConfig", "LlmCheck", "LlmVerdict",
    "PerformanceCheck", "Verdict", "VerificationInputError", "audit_config", "check_detail_logs",
    "check_summary_logs", "compare_accuracy_logs", "official_dtype", "required_tests",
    "run_audit", "run_compliance", "spec_of_run", "verify", "verify_llm",
]
