"""Score an accuracy run again from the log it kept (``mlharness score RUN_DIR``).

The run's task is rebuilt from its ``run.json`` (its benchmark, data set and options, each
replaceable: a tokenizer the run lacked, a data set moved elsewhere), ``mlperf_log_accuracy.json``
is scored as the run would have scored it, and ``accuracy.txt`` and ``run.json`` get the new
result. Any benchmark kind: the task's own ``score``. A run whose test finished and whose scoring
failed (``run.json`` ``error.phase`` ``"scoring"``) becomes ``ok``; a run whose test did not
finish has an incomplete log and is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlharness.errors import ConfigError
from mlharness.files import write_text_atomic
from mlharness.loadgen.mllog import read_accuracy_log
from mlharness.record import RUN_FILE, RunRecord
from mlharness.runner.execute import SCORING_PHASE
from mlharness.store import record_run
from mlharness.sut.assemble import task_options
from mlharness.tasks import AccuracyResult, create_task
from mlharness.tasks.base import Progress

ACCURACY_LOG = "mlperf_log_accuracy.json"


@dataclass
class Rescored:
    """The run scored again: its record as saved, the new and the earlier accuracy."""

    run_dir: Path
    record: RunRecord
    accuracy: AccuracyResult
    previous: AccuracyResult | None
    was: str  # the record's status before: "ok", or the error status of a failed scoring


def rescore(run_dir: Path, task_option: dict[str, Any] | None = None,
            dataset: Path | None = None, progress: Progress | None = None) -> Rescored:
    """Score ``run_dir``'s accuracy log with its task, ``task_option`` and ``dataset`` (when
    given) replacing the run's; ConfigError for what is not a finished accuracy run."""
    run_dir = Path(run_dir)
    if not (run_dir / RUN_FILE).is_file():
        raise ConfigError(f"{run_dir} holds no {RUN_FILE}: not a run directory of mlharness",
                          "give a directory `mlharness run --mode accuracy` wrote "
                          "(runs/<benchmark>/<scenario>-accuracy-<time>)")
    record = RunRecord.load(run_dir)
    spec = record.spec
    if spec.mode != "accuracy":
        raise ConfigError(f"{run_dir} is a {spec.mode} run: it logs no answers to score",
                          "give an accuracy run's directory (--mode accuracy)")
    scoring_failed = (record.status in ("error", "failed") and record.error is not None
                      and getattr(record.error, "phase", None) == SCORING_PHASE)
    if record.status != "ok" and not scoring_failed:
        why = record.error_message or record.status
        raise ConfigError(f"{run_dir} did not finish its test ({record.status}: {why}), so its "
                          "accuracy log is incomplete", "run the accuracy test again")
    log = run_dir / ACCURACY_LOG
    if not log.is_file():
        raise ConfigError(f"{run_dir} has no {ACCURACY_LOG}", "run the accuracy test again")
    changes: dict[str, Any] = {}
    if task_option:
        changes["task_option"] = {**spec.task_option, **task_option}
    if dataset is not None:
        changes["dataset"] = Path(dataset).absolute()
    if changes:
        spec = spec.replace(**changes)
    task = create_task(spec.benchmark, task_options(spec))
    task.check_scoring()
    task.prepare(progress)
    accuracy = task.score(read_accuracy_log(log))
    write_text_atomic(run_dir / "accuracy.txt", accuracy.text + "\n")
    previous, was = record.accuracy, record.status
    record.spec, record.accuracy = spec, accuracy
    if scoring_failed:
        record.status, record.error = "ok", None
    record.save(run_dir)
    record_run(run_dir)
    return Rescored(run_dir, record, accuracy, previous, was)
