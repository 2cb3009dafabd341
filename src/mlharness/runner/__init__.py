"""Running one test end to end: run directory, child process, supervision, scoring."""

from mlharness.runner.execute import (RunOutcome, RunProgress, checked_task, execute,
                                      raise_if_failed)

__all__ = ["RunOutcome", "RunProgress", "checked_task", "execute", "raise_if_failed"]
