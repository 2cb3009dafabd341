"""Run a compliance audit: a performance run with the test's audit.config, in its own run dir.

The runner copies ``spec.audit_config`` into the fresh run directory as ``audit.config``;
LoadGen (whose working directory is that run directory) applies it. Nothing is left behind in
any other directory.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any, Callable

from mlharness.compliance.audit_config import audit_config
from mlharness.errors import RunFailed
from mlharness.spec import RunSpec


def loadgen_model_of(spec: RunSpec) -> str:
    """The mlperf.conf model key of the spec's benchmark (``resnet50``, ``bert``, ...)."""
    from mlharness.runner.worker import task_options
    from mlharness.tasks import create_task

    return create_task(spec.benchmark, task_options(spec)).loadgen_model


def audit_spec(test: str, base_spec: RunSpec, output_dir: Path, audit_file: Path) -> RunSpec:
    """``base_spec`` as the audit run: performance mode, the audit.config, ``output_dir``."""
    return dataclasses.replace(base_spec, mode="performance", audit_config=audit_file,
                               output_dir=Path(output_dir))


def run_audit(test: str, base_spec: RunSpec, output_dir: Path,
              progress: Callable[[Any], None] | None = None) -> Any:
    """Run ``test``'s audit for ``base_spec`` under ``output_dir``; return the RunRecord.

    ``base_spec`` describes the reference performance run (same scenario, targets, length);
    its mode is ignored. Raises RunFailed if the run fails to produce logs.
    """
    from mlharness.runner import execute

    config = audit_config(test, loadgen_model_of(base_spec))
    with tempfile.TemporaryDirectory(prefix=f"mlharness-{test}-") as tmp:
        audit_file = config.write(Path(tmp) / "audit.config")
        record = execute(audit_spec(test, base_spec, output_dir, audit_file), progress)
    if record.status != "ok":
        err = (record.data.get("error") or {}).get("message", record.status)
        raise RunFailed(f"{test} audit run failed: {err}",
                           hint=f"partial logs kept in {record.run_dir}")
    return record
