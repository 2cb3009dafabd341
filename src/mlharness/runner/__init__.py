"""Running one test end to end: run directory, child process, supervision, scoring."""

from mlharness.runner.execute import RunProgress, RunRecord, execute, raise_if_failed

__all__ = ["RunProgress", "RunRecord", "execute", "raise_if_failed"]
