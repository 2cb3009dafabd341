"""``mlharness`` entry point: builds the parser from one module per command group.

Each command module exposes ``register(subparsers)``; the parser it adds sets ``func`` to a
callable ``(args) -> int`` returning the exit code. Exit codes: 0 ok, 1 the result failed a rule
(INVALID, accuracy below target, checker errors), 2 user error (bad flag, missing file), 3 the
run itself failed (backend raised, worker died), 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from mlharness import __version__
from mlharness.errors import HarnessError

#: command modules under mlharness.cli, in the order --help lists them
COMMANDS = ("run", "demo", "compliance", "submit", "check", "system")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mlharness",
        description="Run MLPerf Inference benchmarks on the official LoadGen: performance and "
        "accuracy in all four scenarios, compliance audits, and submissions the official checker "
        "accepts.",
        epilog="Start with `mlharness demo`. Every command has --help with examples.",
    )
    parser.add_argument("--version", action="version", version=f"mlharness {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"mlharness.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"mlharness.cli.{name}":
                continue  # command group not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from mlharness.cli.render import console_err

    try:
        return int(args.func(args) or 0)
    except HarnessError as exc:
        if args.debug:
            raise
        console_err.print(f"[bold red]error:[/] {exc.message}", highlight=False, soft_wrap=True)
        if exc.hint:
            console_err.print(f"  [yellow]hint:[/] {exc.hint}", highlight=False, soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        console_err.print("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
