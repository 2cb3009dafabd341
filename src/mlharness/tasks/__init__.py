"""Task registry: benchmark name -> the factory that builds its Task.

The demo is built in; every MLPerf benchmark is listed with its factory in the rules data
(``[tasks]`` in ``rules/common.toml``), so adding a benchmark is its task module plus the rules
TOML; the runner never changes.
"""

from __future__ import annotations

import importlib

from mlharness.errors import ConfigError, HarnessError
from mlharness.rules.loader import BenchmarkEntry, task_entries
from mlharness.tasks.base import (AccuracyResult, GenerationTask, Task, TaskOptions, TensorSpec,
                                  TensorTask)

__all__ = ["AccuracyResult", "GenerationTask", "Task", "TaskOptions", "TensorSpec", "TensorTask",
           "BENCHMARKS", "BenchmarkEntry", "create_task"]

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
