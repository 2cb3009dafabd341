"""Child processes: a run's (``runner.worker``) and one-off work done apart, such as building a
compiled package, whose memory then goes back to the system when the child ends.

A child ignores the terminal's SIGINT and SIGHUP (its parent decides how the work ends) and exits
by itself as soon as its parent is gone (killed with SIGKILL, or ended by a stall)."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable

from mlharness.errors import one_line

PARENT_POLL_S = 0.5
#: exit status of a child whose parent vanished
ORPHAN_EXIT = 70
#: seconds a child has to end after SIGTERM before it is killed
TERM_GRACE_S = 5.0


class ChildDied(RuntimeError):
    """The child ended without an answer: a crash, the kernel's out-of-memory killer, a kill."""

    def __init__(self, name: str, exitcode: int | None) -> None:
        self.exitcode = exitcode
        if exitcode is not None and exitcode < 0:
            how = f"was killed by {signal.Signals(-exitcode).name}"
            if -exitcode == signal.SIGKILL:
                how += " (out of memory?)"
        else:
            how = f"ended with exit status {exitcode} without an answer"
        super().__init__(f"the {name} process {how}")


def _watch_parent(parent_pid: int) -> None:
    """Exit the process as soon as ``parent_pid`` is no longer its parent."""
    while True:
        if os.getppid() != parent_pid:
            os._exit(ORPHAN_EXIT)
        time.sleep(PARENT_POLL_S)


def watch_parent(parent_pid: int) -> None:
    """Start the daemon thread that ends this process when the parent dies; ignore the
    terminal's SIGINT/SIGHUP (the parent decides how the work ends)."""
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="watch-parent",
                     daemon=True).start()


def start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (which the queues and shared counters of a
    spawned worker need) with SIGHUP blocked: it ignores SIGINT and SIGTERM by itself but dies of
    a SIGHUP sent to the whole process group (a closed terminal), and its replacement then
    prints tracebacks about semaphores it never saw. A tracker already running is kept."""
    from multiprocessing import resource_tracker

    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        resource_tracker.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives the trip to the parent, else a RuntimeError that says it."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any exception may hold what cannot be pickled
        return RuntimeError(f"{type(exc).__name__}: {one_line(exc)}")


def _child_main(answer_fd: int) -> None:
    """The child's side of :func:`call_in_child`: the work from stdin, the answer to
    ``answer_fd``."""
    parent_pid, work = pickle.load(sys.stdin.buffer)
    watch_parent(parent_pid)
    try:
        # unpickled here, so a module that fails to import is an answer too (found through
        # the parent's sys.path, which PYTHONPATH carries)
        function, args = pickle.loads(work)
        answer = pickle.dumps(("ok", function(*args)))
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
        answer = pickle.dumps(("error", _portable(exc)))
    with os.fdopen(answer_fd, "wb") as out:
        out.write(answer)


def call_in_child(function: Callable[..., Any], *args: Any, name: str) -> Any:
    """``function(*args)`` in a child process (``function``, ``args`` and the result picklable):
    its result, or the exception it raised raised here (a HarnessError keeps its hint);
    :class:`ChildDied` when it ends without an answer. The child is a fresh interpreter that
    imports only what the work needs (not the caller's ``__main__``, unlike multiprocessing's
    spawn), in a session of its own (the terminal's Ctrl-C reaches the parent, which decides);
    if this process is interrupted meanwhile, the child is ended too."""
    work = pickle.dumps((os.getpid(), pickle.dumps((function, args))))
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd, "rb") as answers:
        try:
            # -P: the child's sys.path starts with the parent's (PYTHONPATH), not its own folder
            child = subprocess.Popen(
                [sys.executable, "-P", "-c", f"from mlharness.children import _child_main; "
                                             f"_child_main({write_fd})"],
                stdin=subprocess.PIPE, pass_fds=(write_fd,), start_new_session=True,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
        finally:
            os.close(write_fd)  # the child holds the only writer: its end is our end of file
        try:
            try:
                assert child.stdin is not None
                child.stdin.write(work)
                child.stdin.close()
            except BrokenPipeError:  # it died before it read its work: said below
                pass
            reply = answers.read()
            child.wait()
        finally:
            if child.poll() is None:  # interrupted while it worked
                child.terminate()
                try:
                    child.wait(TERM_GRACE_S)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
    if not reply:
        raise ChildDied(name, child.returncode)
    kind, value = pickle.loads(reply)
    if kind == "error":
        raise value
    return value
