"""``mlharness score RUN_DIR``: score an accuracy run again from the log it kept."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.markup import escape

from mlharness.cli.render import LiveProgress, accuracy_cell, console, print_json
from mlharness.cli.spec_flags import key_value
from mlharness.options import parse_scalar

EXAMPLES = """examples:
  # an LLM accuracy run made without the tokenizer its log is decoded with
  mlharness score runs/llama3.1-8b/Offline-accuracy-20260101-120000 \\
      --task-option tokenizer=./Llama-3.1-8B-Instruct
  mlharness score runs/resnet50/Offline-accuracy-20260101-120000      # any benchmark
  mlharness score runs/demo/Offline-accuracy-<t> --dataset data/moved/ --json

The run's task is rebuilt from its run.json (benchmark, data set, task options; --task-option
and --dataset replace the run's), mlperf_log_accuracy.json is scored as the run scores it (the
official script's numbers), and accuracy.txt and run.json get the result (a run whose scoring
failed, and only its scoring, becomes ok). Runs whose test did not finish are refused: their log
is incomplete.

exit codes: 0 scored (target met, or the benchmark has none), 1 below the target,
            2 not an accuracy run, an incomplete log or a missing input (message + hint)
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("score", help="score an accuracy run again from its kept log",
                       description="Score an accuracy run's mlperf_log_accuracy.json again with "
                                   "its benchmark's official metric, and record the result in "
                                   "its accuracy.txt and run.json.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the accuracy run's directory")
    p.add_argument("--task-option", type=key_value, action="append", default=[],
                   metavar="KEY=VALUE", help="a task option replacing the run's (repeatable), "
                   "e.g. tokenizer=DIR for an LLM")
    p.add_argument("--dataset", type=Path, metavar="PATH",
                   help="the data set, when it is no longer where the run read it")
    p.add_argument("--json", action="store_true", help="print the new accuracy as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress display")
    p.set_defaults(func=score_command)


def score_command(args: argparse.Namespace) -> int:
    # lazy: the runner (tasks, LoadGen log parsing, the store) stays out of `mlharness --help`
    from mlharness.runner.execute import RunProgress
    from mlharness.runner.rescore import rescore

    options = {key: parse_scalar(value) for key, value in args.task_option}
    show = not args.no_progress and not args.json and sys.stderr.isatty()
    with LiveProgress(enabled=show) as bar:
        def progress(done: int, total: int, label: str) -> None:
            bar(RunProgress("prepare", done, total, label=label))

        done = rescore(args.run_dir, options, args.dataset, progress)
    acc = done.accuracy
    if args.json:
        print_json({"run_dir": str(done.run_dir), "accuracy": acc.to_dict(),
                    "previous": done.previous.to_dict() if done.previous else None,
                    "status_before": done.was})
    else:
        verdict = {True: "[green]PASS[/]", False: "[red]FAIL[/]", None: "DONE"}[acc.passed]
        console.print(f"{escape(str(done.run_dir))}: {escape(accuracy_cell(acc))} {verdict}",
                      highlight=False, soft_wrap=True)
        console.print(escape(acc.text), highlight=False, soft_wrap=True)
        for failure in acc.failures:
            console.print(f"  [yellow]{escape(failure)}[/]", highlight=False)
        if done.previous is not None:
            console.print(f"[dim]before: {escape(accuracy_cell(done.previous))}[/]",
                          highlight=False)
        elif done.was != "ok":
            console.print(f"[dim]the run was {done.was} (its scoring failed); now ok[/]",
                          highlight=False)
        console.print(escape(f"written: {done.run_dir / 'accuracy.txt'}, run.json"),
                      highlight=False)
    return 1 if acc.passed is False else 0
