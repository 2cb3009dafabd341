"""``mlharness check``: our checker over the round's rules, and optionally the official one."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.markup import escape

from mlharness.cli.render import console, console_err
from mlharness.errors import ConfigError
from mlharness.rules import DEFAULT_ROUND, ROUNDS, Problem, Rules, load
from mlharness.submission.check import (archive_problems, archives_beside, check_tree,
                                        tree_round)
from mlharness.submission.official import run_official
from mlharness.submission.pack import extract_safely, unsafe_members

EXAMPLES = """examples:
  mlharness check submission/
  mlharness check submission/submission.tar.gz
  mlharness check submission/ --round v6.1 --official ~/src/inference
  mlharness check submission/ --official ~/src/inference --official-flag=--skip-dataset-size-check

exit codes: 0 no problems, 1 problems found, 2 usage error
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="check a submission tree and explain every problem",
                       description="Check a submission tree against the round's rules (the same "
                       "rules as the official MLCommons checker) and say what each problem means "
                       "and which command fixes it. --official also runs the official checker "
                       "from a checkout of github.com/mlcommons/inference and explains its errors.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("root", type=Path, help="submission root (holds open/, closed/ or network/), "
                   "or its .tar.gz (members checked, then the tree inside); archives lying in the "
                   "root are checked for unsafe members too")
    p.add_argument("--round", default=None, choices=ROUNDS,
                   help="the round to check against (default: the round whose seeds the tree's "
                   f"logs record, else {DEFAULT_ROUND})")
    p.add_argument("--official", type=Path, metavar="PATH",
                   help="checkout of mlcommons/inference; runs tools/submission/submission_checker "
                   "(rounds before v5.0: the round's folder, e.g. ../shared/official/rounds/v3.0, "
                   "whose tools/submission/submission_checker.py runs)")
    p.add_argument("--official-flag", action="append", default=[], metavar="FLAG",
                   help="extra flag for the official checker (repeatable), e.g. "
                   "--official-flag=--skip-dataset-size-check")
    p.add_argument("--json", action="store_true", help="print the problems as JSON")
    p.set_defaults(func=run)


def print_problems(problems: list[Problem], title: str) -> None:
    title = escape(title)  # paths, names and the official checker's text shown literally
    if not problems:
        console.print(f"[green]✓ {title}: no problems[/]")
        return
    console.print(f"[red]✗ {title}: {len(problems)} problem(s)[/]")
    for pr in problems:
        head = f"{pr.where}: {pr.message}" if pr.where else pr.message
        console.print(f"  [red]•[/] {escape(head)}", highlight=False)
        if pr.meaning:
            console.print(escape(f"      means: {pr.meaning}"), highlight=False, style="dim")
        if pr.fix:
            console.print(escape(f"      fix:   {pr.fix}"), highlight=False)


def rules_of(args: argparse.Namespace, root: Path) -> Rules:
    """``--round``'s rules, else those of the round the tree's seeds name (said on stderr)."""
    if args.round is not None:
        return load(args.round)
    found = tree_round(root)
    if found is not None and found != DEFAULT_ROUND:
        console_err.print(f"checking against {found}: the round whose seeds the tree's logs "
                          "record (--round to choose another)", style="dim")
    return load(found or DEFAULT_ROUND)


def _check_archive(args: argparse.Namespace) -> int:
    """``check submission.tar.gz``: its members first; a clean archive is extracted to a
    temporary directory and its tree checked."""
    import tempfile

    unsafe_members(args.root)  # an unreadable archive is a usage error (exit 2)
    problems = archive_problems(args.root)
    rules = load(args.round or DEFAULT_ROUND)
    if not problems:
        with tempfile.TemporaryDirectory(prefix="mlharness-check-") as tmp:
            extract_safely(args.root, Path(tmp))
            rules = rules_of(args, Path(tmp))
            problems = check_tree(Path(tmp), rules)
    if args.json:
        console.print_json(json.dumps({"round": rules.round,
                                       "problems": [p.to_dict() for p in problems]}))
    else:
        print_problems(problems, f"mlharness check {args.root.name} ({rules.round})")
    return 1 if problems else 0


def run(args: argparse.Namespace) -> int:
    if not args.root.exists():
        raise ConfigError(f"submission root not found: {args.root}",
                          hint="pass the --output of `mlharness submit` (or its .tar.gz)")
    if args.root.is_file():
        if args.official:
            raise ConfigError("--official checks a tree, not an archive",
                              hint=f"extract {args.root.name} first, or drop --official")
        return _check_archive(args)
    rules = rules_of(args, args.root)
    problems = [p for a in archives_beside(args.root) for p in archive_problems(a)]
    problems += check_tree(args.root, rules)
    official = None
    if args.official:
        official = run_official(args.root, args.official, rules.checker_version,
                                args.official_flag, script=rules.checker_script)
    if args.json:
        data: dict[str, Any] = {"round": rules.round,
                                "problems": [p.to_dict() for p in problems]}
        if official is not None:
            data["official"] = {"command": official.command, "returncode": official.returncode,
                                "ok": official.summary_ok,
                                "problems": [p.to_dict() for p in official.problems]}
        console.print_json(json.dumps(data))
    else:
        print_problems(problems, f"mlharness check ({rules.round})")
        if official is not None:
            console.print(escape("official: " + " ".join(official.command[1:])), style="dim",
                          highlight=False)
            print_problems(official.problems, f"official checker {rules.checker_version} "
                           f"(exit {official.returncode})")
    failed = bool(problems) or (official is not None and official.returncode != 0)
    return 1 if failed else 0
