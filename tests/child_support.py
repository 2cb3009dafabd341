"""Functions a test runs in a child process (``mlharness.children.call_in_child``): module-level,
so the spawned child can import them."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from mlharness.errors import ModelError


def pid() -> int:
    return os.getpid()


def refuse(message: str) -> None:
    raise ModelError(message, hint="a hint from the child")


class Unpicklable(Exception):
    def __init__(self) -> None:
        super().__init__("it holds a lock")
        self.lock = threading.Lock()


def raise_unpicklable() -> None:
    raise Unpicklable()


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def exit_silently(code: int) -> None:
    os._exit(code)


def sleep_after_writing_pid(path: Path) -> None:
    Path(path).write_text(str(os.getpid()))
    time.sleep(120)


def export_fails() -> None:
    raise RuntimeError("exported again")


def unpicklable_answer() -> object:
    return threading.Lock()
