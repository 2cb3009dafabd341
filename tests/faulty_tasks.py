"""Test-only tasks (``-b faulty_tasks:<factory>``): the demo task with a dataset phase that hangs
or raises, in the run's child process only (the parent's prepare succeeds)."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

from mlharness.tasks.demo import create as create_demo


def _in_child() -> bool:
    return multiprocessing.parent_process() is not None


def hanging_index(name: str, options: Any) -> Any:
    """Reading the dataset index never finishes in the worker."""
    task = create_demo("demo", options)
    if _in_child():
        time.sleep(3600)
    return task


def hanging_samples(name: str, options: Any) -> Any:
    """LoadGen's sample loading never returns."""
    task = create_demo("demo", options)
    task.load_samples = lambda indices: time.sleep(3600)  # type: ignore[method-assign]
    return task


def raising_factory(name: str, options: Any) -> Any:
    """A task of the user's own whose constructor raises."""
    raise ValueError("injected failure in the task factory")


def raising_score(name: str, options: Any) -> Any:
    """Scoring raises a plain exception (a bug in a task of the user's own)."""
    task = create_demo("demo", options)

    def score(entries: Any) -> Any:
        raise ZeroDivisionError("injected failure while scoring")

    task.score = score  # type: ignore[method-assign]
    return task


def slow_score(name: str, options: Any) -> Any:
    """Scoring takes a minute and says when it starts (``scoring.started`` in the cwd)."""
    task = create_demo("demo", options)

    def score(entries: Any) -> Any:
        from pathlib import Path

        Path("scoring.started").write_text("")
        time.sleep(60)
        raise AssertionError("never reached in the test")

    task.score = score  # type: ignore[method-assign]
    return task
