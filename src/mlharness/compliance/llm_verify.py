"""The LLM audits, verified as the official scripts do, into the official layout.

Each judges the audit run's ``mlperf_log_accuracy.json`` alone (no reference run):

* TEST06 (``compliance/TEST06/run_verification.py``, llama3.1-8b, llama2-70b-99.9, deepseek-r1):
  first token, at most one EOS, reported token count (:mod:`mlharness.llm.test06`); writes
  ``TEST06/verify_accuracy.txt`` and ``TEST06/accuracy/mlperf_log_accuracy.json``, nothing else.
* TEST07 (gpt-oss-120b): the accuracy of the audit's log, which ran on the GPQA compliance set,
  scored by the benchmark's task (the official ``eval_mlperf_accuracy.py`` decisions), against
  ``test07_accuracy_threshold`` (:mod:`mlharness.llm.test07`); writes ``verify_accuracy.txt``,
  the accuracy log and ``performance/run_1/`` logs.
* TEST09 (gpt-oss-120b): the mean output length against ``test09_{min,max}_output_tokens``
  (:mod:`mlharness.llm.test09`); writes ``verify_output_len.txt``, the accuracy log and
  ``performance/run_1/`` logs.

Thresholds come from the audit run's own ``audit.config`` (what the official ``--audit-config``
reads), else from the round rules. The EOS id of TEST06: the caller's, else the tokenizer's the
audit ran with (``--task-option tokenizer=DIR`` or ``--model DIR``), else the official default 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.compliance.accuracy_check import VerificationInputError, load_accuracy_entries
from mlharness.compliance.audit_checks import (
    check_audit_applied, check_not_audit, check_same_benchmark, record_of, task_of_run,
)
from mlharness.compliance.audit_config import TEST07_ENTRIES, llm_benchmark
from mlharness.compliance.layout import (
    ACCURACY, DETAIL, performance_logs, prepare_output, write_outputs,
)
from mlharness.compliance.logs import read_detail
from mlharness.errors import HarnessError
from mlharness.llm import eos, test06, test07, test09
from mlharness.rules import BenchmarkRules
from mlharness.spec import RunSpec
from mlharness.tasks.text_generation import TOKENIZER_FILES

#: the official script's default ``--eos_token_id``
OFFICIAL_EOS_TOKEN_ID = 2
#: the file each test writes its verdict to
VERDICT_FILE = {"TEST06": "verify_accuracy.txt", "TEST07": "verify_accuracy.txt",
                "TEST09": "verify_output_len.txt"}


@dataclass
class LlmCheck:
    """One of a test's checks; ``passed`` None: skipped (TEST06's first token in Offline)."""

    name: str
    passed: bool | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


@dataclass
class LlmVerdict:
    """The outcome of TEST06, TEST07 or TEST09."""

    test: str
    output_dir: Path  # <out>/<test>
    audit_run: Path
    scenario: str
    checks: list[LlmCheck]
    reference_performance: Path | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed is not False for c in self.checks)

    @property
    def verdict_file(self) -> Path:
        return self.output_dir / VERDICT_FILE[self.test]

    def to_dict(self) -> dict[str, Any]:
        return {
            "test": self.test, "passed": self.passed, "output_dir": str(self.output_dir),
            "audit_run": str(self.audit_run), "scenario": self.scenario,
            "reference_performance": (str(self.reference_performance)
                                      if self.reference_performance else None),
            "checks": [c.to_dict() for c in self.checks], "notes": list(self.notes),
        }


def audit_config_value(run_dir: Path, key: str) -> float | None:
    """A ``*.*.<key>`` value of the run's ``audit.config``, read as the official TEST07/TEST09
    scripts read it (last part of the key; inline comments dropped), or None."""
    path = run_dir / "audit.config"
    if not path.is_file():
        return None
    found = None
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, value = (p.strip() for p in line.split("=", 1))
        parts = name.split(".")
        if len(parts) >= 3 and parts[-1] == key:
            try:
                found = float(value.split("#", 1)[0].strip())
            except ValueError:
                continue
    return found


def _spec(run_dir: Path) -> RunSpec | None:
    """The audit's RunSpec, or None for a run directory mlharness did not make (no run.json)."""
    try:
        return record_of(run_dir).spec
    except VerificationInputError:
        return None


def _tokenizer_of(spec: RunSpec | None) -> Path | None:
    if spec is None:
        return None
    given = (spec.task_option or {}).get("tokenizer")
    if given:
        return Path(given)
    model = spec.model
    if model is not None and Path(model).is_dir() and any(
            (Path(model) / f).is_file() for f in TOKENIZER_FILES):
        return Path(model)
    return None


def test06_eos(spec: RunSpec | None, given: int | None) -> tuple[int, str]:
    """The EOS id TEST06 counts and where it came from."""
    if given is not None:
        return given, "given"
    tokenizer = _tokenizer_of(spec)
    if tokenizer is not None:
        found = eos.eos_token_id(tokenizer)
        if found is not None:
            return found, f"the eos_token of the tokenizer {tokenizer}"
        return OFFICIAL_EOS_TOKEN_ID, (f"the official default: the tokenizer {tokenizer} names "
                                       "no eos_token")
    return OFFICIAL_EOS_TOKEN_ID, "the official default: no tokenizer given"


def _scenario(run_dir: Path, audit_logs: Path) -> str:
    """The run's scenario (Interactive too), else LoadGen's."""
    spec = _spec(run_dir)
    if spec is not None:
        return str(spec.scenario)
    return str(read_detail(audit_logs / DETAIL).get("effective_scenario") or "")


def _test06(verdict: LlmVerdict, log: Path, eos_token_id: int | None) -> str:
    token, source = test06_eos(_spec(verdict.audit_run), eos_token_id)
    try:
        result = test06.verify_log(log, verdict.scenario, token)
    except HarnessError as exc:
        raise VerificationInputError(f"TEST06: {exc.message}", hint=exc.hint) from exc
    first = ("skipped in Offline (the first token is not reported apart)"
             if result.first_token is None else "each reported first token starts its output")
    verdict.checks = [
        LlmCheck("first token", result.first_token, first),
        LlmCheck("EOS", result.eos, f"outputs end in at most one EOS token (id {token})"),
        LlmCheck("sample length", result.sample_length,
                 "each reported n_tokens equals the output's length"),
    ]
    words = ("first token", "EOS tokens", "n_tokens")  # how llm.test06 words each problem
    for check, word in zip(verdict.checks, words, strict=True):
        why = next((p for p in result.problems if word in p), None)
        if check.passed is False and why:  # a failed check names its first bad sample
            check.detail = why
    verdict.notes += [p for p in result.problems if not any(w in p for w in words)]
    verdict.notes.append(f"EOS token id {token}: {source}")
    if token != OFFICIAL_EOS_TOKEN_ID:
        verdict.notes.append(
            "run_verification.py given `-e N` compares N as a string and always passes the EOS "
            "check; this verdict counts the id as an integer (as the script's default 2 does)")
    return result.verify_accuracy_txt()


def _threshold(run_dir: Path, key: str, default: float | None, test: str) -> float:
    value = audit_config_value(run_dir, key)
    if value is None:
        value = default
    if value is None:
        raise VerificationInputError(f"{test}: no {key} in {run_dir / 'audit.config'} or the "
                                     "round rules", hint=f"run the audit with --audit {test}")
    return value


def _bench(spec: RunSpec | None) -> BenchmarkRules | None:
    return llm_benchmark(spec.benchmark) if spec is not None else None


def _test07(verdict: LlmVerdict, log: Path) -> str:
    bench = _bench(_spec(verdict.audit_run))
    threshold = _threshold(verdict.audit_run, "test07_accuracy_threshold",
                           bench.test07_accuracy_threshold if bench else None, "TEST07")
    entries = load_accuracy_entries(log, "audit")
    try:
        task = task_of_run(verdict.audit_run)
        scored = task.score([(int(e["qsl_idx"]), bytes.fromhex(e["data"])) for e in entries])
    except HarnessError as exc:
        raise VerificationInputError(f"TEST07 cannot score the audit's log: {exc.message}",
                                     hint=exc.hint) from exc
    result = test07.verify(scored.text + "\n", threshold)
    score = "no 'exact_match' printed" if result.score is None else f"{result.score:g}"
    verdict.checks = [LlmCheck("accuracy", result.passed,
                               f"exact_match {score}, threshold {threshold:g}")]
    if result.score is None:
        verdict.notes.append(f"the accuracy could not be scored here: {scored.text}")
    sets = sorted({str(s.dataset) for s in task.dataset.samples})
    if any("gpqa" not in s.lower() for s in sets):
        verdict.notes.append("TEST07 runs on the GPQA compliance set "
                             "(acc_eval_compliance_gpqa.parquet); this audit's data set holds "
                             + ", ".join(sets))
    size = TEST07_ENTRIES.get(bench.name if bench else "", {}).get("min_query_count")
    if size is not None and len(task.dataset.samples) != size:
        verdict.notes.append(f"the audit's data set has {len(task.dataset.samples)} samples; "
                             f"the official compliance set has {size}")
    return result.verify_accuracy_txt()


def _test09(verdict: LlmVerdict, log: Path) -> str:
    bench = _bench(_spec(verdict.audit_run))
    bounds = (bench.test09_output_tokens if bench else None) or {}
    low = _threshold(verdict.audit_run, "test09_min_output_tokens", bounds.get("min"), "TEST09")
    high = _threshold(verdict.audit_run, "test09_max_output_tokens", bounds.get("max"), "TEST09")
    try:
        result = test09.verify_log(log, low, high)
    except HarnessError as exc:
        raise VerificationInputError(exc.message, hint=exc.hint) from exc
    verdict.checks = [LlmCheck("output length", result.passed,
                               f"mean {result.mean:.2f} tokens over {len(result.lengths)} "
                               f"outputs, allowed {low:g} .. {high:g}")]
    return result.verify_output_len_txt()


def verify_llm(test: str, audit_run_dir: Path, out_dir: Path,
               reference_perf_run_dir: Path | None = None, overwrite: bool = False,
               eos_token_id: int | None = None) -> LlmVerdict:
    """Verify a TEST06/TEST07/TEST09 audit run and write ``<out_dir>/<test>/`` as the official
    ``run_verification.py`` does. Raises VerificationInputError on missing or unreadable
    inputs; a failed test is a verdict with ``passed == False``."""
    audit_run_dir = Path(audit_run_dir).resolve()
    audit_logs = performance_logs(audit_run_dir)
    check_audit_applied(test, audit_logs)
    reference = None
    if reference_perf_run_dir is not None:
        reference = Path(reference_perf_run_dir).resolve()
        check_not_audit(performance_logs(reference))
        check_same_benchmark(reference, audit_run_dir)
    log = audit_logs / ACCURACY
    if not log.is_file():
        raise VerificationInputError(f"no {ACCURACY} in {audit_logs}",
                                     hint="the audit run did not finish; run it again")
    verdict = LlmVerdict(test, Path(out_dir) / test, audit_run_dir,
                         _scenario(audit_run_dir, audit_logs), [], reference)
    if test == "TEST06":
        text = _test06(verdict, log, eos_token_id)
    elif test == "TEST07":
        text = _test07(verdict, log)
    else:
        text = _test09(verdict, log)
    with_performance = test != "TEST06"  # the official TEST06 script copies no performance log
    test_dir = prepare_output(Path(out_dir), test, overwrite, with_performance=with_performance)
    write_outputs(test_dir, audit_logs, {VERDICT_FILE[test]: text}, with_accuracy_log=True,
                  with_performance=with_performance)
    return verdict
