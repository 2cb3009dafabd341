"""Run a compliance audit: a performance run with the test's audit.config, in its own run dir.

The runner copies ``spec.audit_config`` into the fresh run directory as ``audit.config``;
LoadGen (whose working directory is that run directory) applies it. Nothing is left behind in
any other directory.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable

from mlharness.compliance.accuracy_check import VerificationInputError
from mlharness.compliance.audit_config import audit_config
from mlharness.compliance.verify import verify
from mlharness.errors import ConfigError, RunFailed
from mlharness.record import RUN_FILE, read_record
from mlharness.spec import RunSpec
from mlharness.tasks import create_task


def task_of_spec(spec: RunSpec) -> Any:
    """The spec's benchmark task (its data set read)."""
    # lazy: sut.assemble (the backends; ~7 ms) stays out of `mlharness --help`
    from mlharness.sut.assemble import task_options

    return create_task(spec.benchmark, task_options(spec))


def loadgen_model_of(spec: RunSpec) -> str:
    """The mlperf.conf model key of the spec's benchmark (``resnet50``, ``bert``, ...)."""
    return str(task_of_spec(spec).loadgen_model)


def audit_spec(test: str, base_spec: RunSpec, output_dir: Path, audit_file: Path) -> RunSpec:
    """``base_spec`` as the audit run: performance mode, the audit.config, ``output_dir``."""
    return base_spec.replace(mode="performance", audit_config=audit_file,
                             output_dir=Path(output_dir), label=test, purpose=None)


def run_audit(test: str, base_spec: RunSpec, output_dir: Path,
              progress: Callable[[Any], None] | None = None,
              dataset: Path | None = None) -> Any:
    """Run ``test``'s audit for ``base_spec`` under ``output_dir``; return the RunRecord.

    ``base_spec`` describes the reference performance run (same scenario, targets, length);
    its mode is ignored. ``dataset`` replaces its data set: TEST07 runs on the benchmark's
    compliance set (gpt-oss-120b: ``acc_eval_compliance_gpqa.parquet``) and needs it. Raises
    RunFailed if the run fails to produce logs.
    """
    # lazy: the runner (multiprocessing, http; ~60 modules) stays out of `mlharness --help`
    from mlharness.runner import execute

    if test == "TEST07" and dataset is None:
        raise ConfigError("TEST07 runs on the GPQA compliance set, not the performance data set",
                          hint="give it: --test07-dataset acc/acc_eval_compliance_gpqa.parquet "
                               "(from the gpt-oss-120b dataset download)")
    if dataset is not None:
        base_spec = base_spec.replace(dataset=Path(dataset))
    task = task_of_spec(base_spec)
    config = audit_config(test, task.loadgen_model)
    unique = any(key == "performance_issue_unique" and value for _, key, value in config.entries)
    if unique and base_spec.performance_sample_count is None:
        # each loaded sample is issued once; LoadGen 6.0.17 crashes (SIGSEGV) in Offline when the
        # performance sample count (mlperf.conf: gpt-oss-120b 6396) exceeds the samples there
        # are (the 990 of TEST07's GPQA set), so the audit loads what the data set holds
        base_spec = base_spec.replace(performance_sample_count=task.performance_count())
    with tempfile.TemporaryDirectory(prefix=f"mlharness-{test}-") as tmp:
        audit_file = config.write(Path(tmp) / "audit.config")
        record = execute(audit_spec(test, base_spec, output_dir, audit_file), progress)
    if record.status != "ok":
        err = record.record.error_message or record.status
        raise RunFailed(f"{test} audit run failed: {err}",
                           hint=f"partial logs kept in {record.run_dir}")
    return record


def spec_of_run(run_dir: Path, **overrides: Any) -> RunSpec:
    """The RunSpec a finished run was made with (from its ``run.json``), as an audit's base."""
    if not (Path(run_dir) / RUN_FILE).is_file():
        raise VerificationInputError(f"no {RUN_FILE} in {run_dir}",
                                     hint="give a run directory made by mlharness run")

    try:
        spec = read_record(Path(run_dir)).spec
    except ConfigError as exc:
        raise VerificationInputError(exc.message, hint=exc.hint) from None
    return spec.replace(mode="performance", audit_config=None, **overrides)


def run_compliance(test: str, reference_perf_run_dir: Path,
                   reference_accuracy_run_dir: Path | None, out_dir: Path,
                   runs_dir: Path | None = None, overwrite: bool = False,
                   progress: Callable[[Any], None] | None = None,
                   dataset: Path | None = None, eos_token_id: int | None = None) -> Any:
    """Audit the SUT of ``reference_perf_run_dir`` with its own settings and verify: the one call
    a submission needs per benchmark x scenario x test. Audit runs go under
    ``<runs_dir or the reference's output dir>/compliance/<test>/``; returns the Verdict.
    ``dataset``: TEST07's compliance set; ``eos_token_id``: TEST06's (default: the tokenizer's)."""
    base = spec_of_run(reference_perf_run_dir)
    root = Path(runs_dir) if runs_dir is not None else base.output_dir
    record = run_audit(test, base, root / "compliance" / test, progress, dataset=dataset)
    return verify(test, reference_perf_run_dir, reference_accuracy_run_dir, record.run_dir,
                  out_dir, overwrite=overwrite, eos_token_id=eos_token_id)
