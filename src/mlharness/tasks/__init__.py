"""Task registry: benchmark name -> the factory that builds its Task.

The demo is built in; every MLPerf benchmark is listed with its factory in the rules data
(``[tasks]`` in ``rules/common.toml``), so adding a benchmark is its task module plus the rules
TOML; the runner never changes.
"""

from __future__ import annotations

import dataclasses
import importlib

from mlharness.errors import ConfigError, HarnessError
from mlharness.rules.loader import BenchmarkEntry, rules_for, task_entries
from mlharness.rules.model import BenchmarkRules
from mlharness.tasks.base import (AccuracyResult, GenerationTask, Task, TaskOptions, TensorSpec,
                                  TensorTask)

__all__ = ["AccuracyResult", "GenerationTask", "Task", "TaskOptions", "TensorSpec", "TensorTask",
           "BENCHMARKS", "BenchmarkEntry", "benchmark_rules", "create_task"]

BENCHMARKS: dict[str, BenchmarkEntry] = {
    "demo": BenchmarkEntry("mlharness.tasks.demo:create",
                           "UCI digits 8x8 classifier shipped with the package", "demo"),
    **task_entries(),
}


def create_task(name: str, options: TaskOptions) -> Task:
    """Build the task for benchmark ``name`` (or ``package.module:factory`` for your own task)."""
    entry = BENCHMARKS.get(name)
    if entry is None and ":" in name:
        entry = BenchmarkEntry(name, "user task")
    if entry is None:
        raise ConfigError(
            f"unknown benchmark {name!r}",
            hint="choose one of: " + ", ".join(sorted(BENCHMARKS)),
        )
    if entry.rules is not None and options.rules is None:
        options = dataclasses.replace(options, rules=rules_for(entry.rules, options.round))
    module_name, func_name = entry.factory.split(":", 1)
    if entry.summary != "user task":
        return getattr(importlib.import_module(module_name), func_name)(name, options)
    try:  # a task of the user's own: its import and construction errors are input errors
        factory = getattr(importlib.import_module(module_name), func_name)
        return factory(name, options)
    except HarnessError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code may raise anything
        raise ConfigError(f"cannot create task {name!r}: {type(exc).__name__}: {exc}",
                          hint="give an importable 'module:factory(name, options)' on sys.path") from exc


def benchmark_rules(name: str, round: str | None = None) -> BenchmarkRules | None:
    """The rules benchmark ``name`` runs under (``round``'s, else the newest round's that has
    them), known without building its task; None for one without MLPerf rules (the demo, a
    task of your own). A round without them: ConfigError naming what it has."""
    entry = BENCHMARKS.get(name)
    if entry is None or entry.rules is None:
        return None
    return rules_for(entry.rules, round)
