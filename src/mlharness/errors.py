"""The HarnessError family: problems a user can cause or fix, each with a one-line hint."""

from __future__ import annotations


class HarnessError(Exception):
    """An error the user can act on. The CLI prints ``message`` and ``hint`` and exits 2."""

    exit_code = 2

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class ConfigError(HarnessError):
    """A bad flag, TOML value or combination of settings."""


class DatasetError(HarnessError):
    """A missing or malformed dataset file."""


class ModelError(HarnessError):
    """A missing model or one whose inputs/outputs do not match the task."""


class RunFailed(HarnessError):
    """The run started but did not finish cleanly (backend raised, worker died, stall)."""

    exit_code = 3


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP arrived while a command ran. The CLI exits 128 + signum."""

    def __init__(self, signum: int, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signum = signum
        self.signal_name = signal_name


def one_line(exc: BaseException, limit: int = 300) -> str:
    """A library's exception as one line of at most ``limit`` characters (runtimes raise
    multi-line messages with their own tracebacks in them)."""
    return " ".join(str(exc).split())[:limit]
