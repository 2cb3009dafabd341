"""``mlharness`` entry point: builds the parser from one module per command group.

Each command module exposes ``register(subparsers)``; the parser it adds sets ``func`` to a
callable ``(args) -> int`` returning the exit code. Exit codes: 0 ok, 1 the result failed a rule
(INVALID, accuracy below target, checker errors), 2 user error (bad flag, missing file), 3 the
run itself failed (backend raised, worker died, stall), 128+n ended by signal n (130 SIGINT,
143 SIGTERM, 129 SIGHUP; 141 when the reader of stdout went away, as in ``| head``). ``--debug``
(tracebacks) goes before or after the command.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
from typing import Iterator

from mlharness import __version__
from mlharness.errors import HarnessError, Interrupted
from mlharness.redact import guard_output

#: signals that end a command: each raises Interrupted once (later ones are ignored while winding down)
END_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

#: command modules under mlharness.cli, in the order --help lists them
COMMANDS = ("run", "get", "tune", "demo", "compliance", "submit", "check", "system", "runs",
            "compare", "report", "serve", "calibrate")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mlharness", allow_abbrev=False,
        description="Run MLPerf Inference benchmarks on the official LoadGen: performance and "
        "accuracy in all four scenarios, compliance audits, and submissions the official checker "
        "accepts.",
        epilog="Start with `mlharness demo`. Every command has --help with examples.",
    )
    parser.add_argument("--version", action="version", version=f"mlharness {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        # every listed command must import: a broken module fails here, never silently vanishes
        importlib.import_module(f"mlharness.cli.{name}").register(sub)
    _add_debug(parser)
    _no_abbreviations(parser)
    return parser


def _no_abbreviations(parser: argparse.ArgumentParser) -> None:
    """Turn off argparse's prefix matching on every (sub)parser: `--mode` must never be taken
    as `--model` (a flag is given in full or it is an error)."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                _no_abbreviations(child)


def _add_debug(parser: argparse.ArgumentParser) -> None:
    """Accept --debug after every (sub)command too, without overriding an earlier one."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                if "--debug" not in child._option_string_actions:
                    child.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                                       help="show tracebacks on errors")
                _add_debug(child)


@contextlib.contextmanager
def ending_signals() -> Iterator[None]:
    """Turn SIGINT, SIGTERM and SIGHUP into ``Interrupted`` (a KeyboardInterrupt) so that
    runs end their worker and record "interrupted"; later signals are ignored while winding down."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if fired:
            return
        fired.append(signum)
        raise Interrupted(signum, signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handler) for sig in END_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from rich.markup import escape

    # lazy: every spawned child (a run's worker) re-imports this module via the console script
    from mlharness.cli.render import console_err
    from mlharness.store.index import on_notice

    on_notice(lambda text: console_err.print(f"[yellow]note:[/] {escape(text)}", highlight=False,
                                             soft_wrap=True))
    guard_output()  # log lines of this process, as the consoles, hold no secret
    try:
        with ending_signals():
            return int(args.func(args) or 0)
    except HarnessError as exc:
        if args.debug:
            raise
        # messages carry paths, names and remote nodes' text: shown literally, never as markup
        console_err.print(f"[bold red]error:[/] {escape(exc.message)}", highlight=False,
                          soft_wrap=True)
        if exc.hint:
            console_err.print(f"  [yellow]hint:[/] {escape(exc.hint)}", highlight=False,
                              soft_wrap=True)
        return exc.exit_code
    except BrokenPipeError:
        # the reader of stdout went away (`mlharness compare | head`): stop quietly, as Unix
        # tools do, and keep the interpreter's final flush of stdout from raising again
        _silence_stdout()
        return 128 + int(signal.SIGPIPE)
    except OSError as exc:  # the file system said no (full disk, name too long, permissions)
        if args.debug:
            raise
        where = f" ({exc.filename})" if exc.filename else ""
        console_err.print(f"[bold red]error:[/] {escape((exc.strerror or str(exc)) + where)}",
                          highlight=False, soft_wrap=True)
        console_err.print(f"  [yellow]hint:[/] {escape(os_hint(exc))}", highlight=False,
                          soft_wrap=True)
        return 2
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)
        name = exc.signal_name if isinstance(exc, Interrupted) else "SIGINT"
        run_dir = getattr(exc, "run_dir", None)
        kept = f"; partial logs kept in {run_dir}" if run_dir else ""
        console_err.print(escape(f"interrupted by {name}{kept}"), highlight=False, soft_wrap=True)
        return 128 + signum


def os_hint(exc: OSError) -> str:
    """What to do about a file system error."""
    import errno

    return {errno.ENOSPC: "the disk is full: free some space, or write elsewhere",
            errno.EDQUOT: "your disk quota is used up: free some space, or write elsewhere",
            errno.ENAMETOOLONG: "a file name or path is too long: use a shorter one",
            errno.EACCES: "you may not write there: choose another place",
            errno.EPERM: "you may not write there: choose another place",
            errno.EROFS: "the file system is read-only: choose another place",
            }.get(exc.errno or 0, "check the path; --debug shows where it happened")


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (e.g. captured in tests)
        pass


if __name__ == "__main__":
    sys.exit(main())
