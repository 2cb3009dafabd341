"""What verification checks about the runs it is given: that an audit really ran with its
test's audit.config (from LoadGen's effective values), that a reference is not an audit, that both
ran the same benchmark; and the run records and tasks behind them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlharness import rules
from mlharness.compliance.accuracy_check import VerificationInputError
from mlharness.compliance.audit_config import (
    LLM_TESTS, TEST01_ACCURACY_LOG_RNG_SEED, TEST04_PER_SCENARIO, TEST06_ENTRIES, TEST07_ENTRIES,
    TEST09_ENTRIES, TESTS,
)
from mlharness.compliance.layout import DETAIL
from mlharness.compliance.logs import DetailFacts, read_detail
from mlharness.errors import ConfigError
from mlharness.record import RUN_FILE, RunRecord, read_record
from mlharness.tasks import create_task


def test05_round(facts: DetailFacts) -> str | None:
    """The round whose TEST05 seeds the run used (None: not a TEST05 audit)."""
    seeds = {k: facts.get(f"effective_{k}") for k in
             ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed")}
    for name in rules.ROUNDS:
        if rules.load(name).test05_seeds == seeds:
            return name
    return None


def _llm_audit(facts: DetailFacts) -> str | None:
    """TEST06/TEST07/TEST09 by the values only their audit.config sets: the TEST01 seed, no
    minimum duration, no sample concatenation, the test's sampling target, and whether each
    sample is issued once (TEST07/TEST09). Their min_query_count is not a mark: in Offline
    LoadGen counts it in samples, and issuing each sample once caps it at the samples loaded."""
    if facts.get("effective_accuracy_log_rng_seed") != TEST01_ACCURACY_LOG_RNG_SEED \
            or facts.get("effective_min_duration_ms") != 0 \
            or bool(facts.get("effective_sample_concatenate_permutation")):
        return None
    target = facts.get("effective_accuracy_log_sampling_target")
    if bool(facts.get("effective_performance_issue_unique")):
        for test, tables in (("TEST07", TEST07_ENTRIES), ("TEST09", TEST09_ENTRIES)):
            if any(target == e["accuracy_log_sampling_target"] for e in tables.values()):
                return test
        return None
    return "TEST06" if target == TEST06_ENTRIES["accuracy_log_sampling_target"] else None


def audit_applied(test: str, facts: DetailFacts) -> bool:
    """Whether LoadGen ran with ``test``'s audit.config (the effective values of the detail log)."""
    if test == "TEST05":
        return test05_round(facts) is not None
    if test in LLM_TESTS:
        return _llm_audit(facts) == test
    if test == "TEST01":
        return (facts.get("effective_accuracy_log_rng_seed") == TEST01_ACCURACY_LOG_RNG_SEED
                and _llm_audit(facts) is None)
    return (bool(facts.get("effective_performance_issue_same"))
            and facts.get("effective_performance_issue_same_index")
            == TEST04_PER_SCENARIO["performance_issue_same_index"])


def check_not_audit(ref_logs: Path) -> None:
    """The reference must be an ordinary performance run, not an earlier audit."""
    facts = read_detail(ref_logs / DETAIL)
    for test in TESTS:
        if audit_applied(test, facts):
            raise VerificationInputError(
                f"{ref_logs} is a {test} audit run, not the performance run being audited",
                hint="give --reference-perf the ordinary performance run")


def check_audit_applied(test: str, audit_logs: Path) -> None:
    """Refuse to verify a run that LoadGen did not run with the test's audit.config."""
    facts = read_detail(audit_logs / DETAIL)
    if not audit_applied(test, facts):
        raise VerificationInputError(
            f"{audit_logs} was not run with the {test} audit.config",
            hint=f"run the audit with `mlharness compliance --audit {test} ...` or give its run dir")
    if facts.get("effective_test_mode") != "PerformanceOnly":
        raise VerificationInputError(f"{audit_logs} is not a performance-mode run",
                                     hint="the audit is a performance run with audit.config")


def check_same_benchmark(reference: Path, audit: Path) -> None:
    """An audit of another benchmark cannot vouch for this result."""
    ref, got = record_or_none(reference), record_or_none(audit)
    if ref is not None and got is not None and ref.benchmark != got.benchmark:
        raise VerificationInputError(f"the audit ran {got.benchmark}, the reference run "
                                     f"{ref.benchmark}",
                                     hint="audit the same benchmark as the reference run")


def record_of(run_dir: Path) -> RunRecord:
    """The run's RunRecord (VerificationInputError when it has no readable ``run.json``)."""
    if not (run_dir / RUN_FILE).is_file():
        raise VerificationInputError(f"no {RUN_FILE} in {run_dir}",
                                     hint="give a run directory made by mlharness "
                                          "(TEST01: or pass --dtype)")

    try:
        return read_record(run_dir)
    except ConfigError as exc:
        raise VerificationInputError(exc.message, hint=exc.hint) from None


def task_of_run(run_dir: Path) -> Any:
    """The benchmark's Task, rebuilt from the run's ``run.json`` spec."""
    # lazy: sut.assemble (the backends; ~7 ms) stays out of `mlharness --help`
    from mlharness.sut.assemble import task_options

    spec = record_of(run_dir).spec
    return create_task(spec.benchmark, task_options(spec))


def record_or_none(run_dir: Path) -> RunRecord | None:
    """:func:`record_of`, or None for a directory without a readable ``run.json``."""
    try:
        return record_of(run_dir)
    except (VerificationInputError, ValueError):
        return None


def run_notes(run_dir: Path, role: str) -> list[str]:
    """Why a run was INVALID, in the runner's words (what to change), when run.json says so."""
    record = record_or_none(run_dir)
    result = record.result if record is not None else None
    if result is not None and result.valid is False and result.reasons:
        return [f"{role} is INVALID: " + "; ".join(result.reasons)]
    return []
