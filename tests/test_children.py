"""``mlharness.children.call_in_child``: work done in a process of its own (a compiled package's
build), its answer or its error brought back, its death named, and ended with its parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import child_support
from mlharness.children import ChildDied, call_in_child
from mlharness.errors import ModelError


def test_the_answer_comes_from_another_process() -> None:
    assert call_in_child(child_support.pid, name="test") not in (os.getpid(), None)


def test_a_harness_error_comes_back_with_its_hint() -> None:
    with pytest.raises(ModelError, match="no such layer") as caught:
        call_in_child(child_support.refuse, "no such layer", name="test")
    assert caught.value.hint == "a hint from the child"


def test_an_error_that_cannot_travel_is_named() -> None:
    with pytest.raises(RuntimeError, match="^Unpicklable: it holds a lock$"):
        call_in_child(child_support.raise_unpicklable, name="test")


def test_a_killed_child_is_named_with_its_signal() -> None:
    with pytest.raises(ChildDied, match=r"^the package build process was killed by SIGKILL "
                                        r"\(out of memory\?\)$"):
        call_in_child(child_support.kill_self, name="package build")


def test_a_child_that_exits_without_an_answer_is_named() -> None:
    with pytest.raises(ChildDied, match="ended with exit status 3 without an answer") as caught:
        call_in_child(child_support.exit_silently, 3, name="test")
    assert caught.value.exitcode == 3


class Stop(Exception):
    pass


def test_an_interrupted_parent_ends_its_child(tmp_path: Path) -> None:
    """SIGINT/SIGTERM in the parent (here an alarm raising) while the child works: the child
    is ended, not left running."""
    pid_file = tmp_path / "pid"

    def interrupt(signum: int, frame: object) -> None:
        if pid_file.exists():
            raise Stop
        signal.setitimer(signal.ITIMER_REAL, 0.2)  # the child has not started yet: again

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(Stop):
            call_in_child(child_support.sleep_after_writing_pid, pid_file, name="test")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    child = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):  # ended and reaped
        os.kill(child, 0)


def test_an_answer_that_cannot_travel_is_an_error() -> None:
    with pytest.raises(TypeError, match="cannot pickle '_thread.lock' object"):
        call_in_child(child_support.unpicklable_answer, name="test")


def test_the_callers_main_module_is_not_run_again(tmp_path: Path) -> None:
    """A script without ``if __name__ == "__main__"`` may call it: the child does not import
    the script (multiprocessing's spawn would, and run it again)."""
    script = tmp_path / "script.py"
    script.write_text("import child_support\n"
                      "from mlharness.children import call_in_child\n"
                      "print('script ran')\n"
                      "print(call_in_child(child_support.pid, name='test') > 0)\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)},
                         check=True)
    assert out.stdout == "script ran\nTrue\n"
