"""``mlharness check``: our checker over the round's rules, and optionally the official one."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mlharness.errors import ConfigError
from mlharness.rules import DEFAULT_ROUND, ROUNDS, Problem, load
from mlharness.submission.check import check_tree

EXAMPLES = """examples:
  mlharness check submission/
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
    p.add_argument("root", type=Path, help="submission root (holds open/, closed/ or network/)")
    p.add_argument("--round", default=DEFAULT_ROUND, choices=ROUNDS, help="default %(default)s")
    p.add_argument("--official", type=Path, metavar="PATH",
                   help="checkout of mlcommons/inference; runs tools/submission/submission_checker")
    p.add_argument("--official-flag", action="append", default=[], metavar="FLAG",
                   help="extra flag for the official checker (repeatable), e.g. "
                   "--official-flag=--skip-dataset-size-check")
    p.add_argument("--json", action="store_true", help="print the problems as JSON")
    p.set_defaults(func=run)


def print_problems(problems: list[Problem], title: str) -> None:
    from mlharness.cli.render import console

    if not problems:
        console.print(f"[green]✓ {title}: no problems[/]")
        return
    console.print(f"[red]✗ {title}: {len(problems)} problem(s)[/]")
    for pr in problems:
        head = f"{pr.where}: {pr.message}" if pr.where else pr.message
        console.print(f"  [red]•[/] {head}", highlight=False)
        if pr.meaning:
            console.print(f"      means: {pr.meaning}", highlight=False, style="dim")
        if pr.fix:
            console.print(f"      fix:   {pr.fix}", highlight=False)


def run(args: argparse.Namespace) -> int:
    from mlharness.cli.render import console

    if not args.root.is_dir():
        raise ConfigError(f"submission root not found: {args.root}",
                          hint="pass the --output of `mlharness submit`")
    rules = load(args.round)
    problems = check_tree(args.root, rules)
    official = None
    if args.official:
        from mlharness.submission.official import run_official

        official = run_official(args.root, args.official, rules.checker_version, args.official_flag)
    if args.json:
        data = {"round": rules.round, "problems": [p.to_dict() for p in problems]}
        if official is not None:
            data["official"] = {"command": official.command, "returncode": official.returncode,
                                "ok": official.summary_ok,
                                "problems": [p.to_dict() for p in official.problems]}
        console.print_json(json.dumps(data))
    else:
        print_problems(problems, f"mlharness check ({rules.round})")
        if official is not None:
            console.print("official: " + " ".join(official.command[1:]), style="dim", highlight=False)
            print_problems(official.problems, f"official checker {rules.checker_version} "
                           f"(exit {official.returncode})")
    failed = bool(problems) or (official is not None and official.returncode != 0)
    return 1 if failed else 0
