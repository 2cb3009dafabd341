"""``mlharness demo``: the embedded benchmark end to end — four scenarios and an accuracy run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mlharness.cli.render import LiveProgress, console, print_json, results_table

#: no targets here: every performance run measures its own first (mlharness.tune), so the demo
#: is VALID on a machine much faster or slower than the one it was written on
DEMO_RUNS = (
    {"scenario": "SingleStream", "mode": "performance"},
    {"scenario": "MultiStream", "mode": "performance"},
    {"scenario": "Server", "mode": "performance"},
    {"scenario": "Offline", "mode": "performance"},
    {"scenario": "Offline", "mode": "accuracy"},
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo", help="run the embedded demo benchmark end to end",
        description="Run the shipped UCI-digits classifier through the official LoadGen in all "
                    "four scenarios (performance, --test length) plus an accuracy run, and print "
                    "one table. Each scenario's target is measured first by short probe runs "
                    "(as `mlharness tune` does). Takes about a minute; nothing is downloaded.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output-dir", type=Path, default=Path("runs"),
                   help="where run directories go (default runs/; probes in runs/_tune/)")
    p.add_argument("--json", action="store_true", help="print all run.json records as JSON")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=demo_command)


def demo_command(args: argparse.Namespace) -> int:
    from mlharness.cli.run import resolved_spec
    from mlharness.errors import ConfigError
    from mlharness.runner import execute
    from mlharness.spec import RunSpec

    records = []
    worst = 0
    show = not args.no_progress and not args.json and sys.stderr.isatty()
    for settings in DEMO_RUNS:
        try:
            spec = resolved_spec(RunSpec(benchmark="demo", output_dir=args.output_dir,
                                         **settings), quiet=args.json, progress=show)
        except ConfigError as exc:  # no probe was VALID (e.g. Server on a very busy machine)
            if not args.json:
                console.print(f"[red]{settings['scenario']}: {exc.message}[/] ({exc.hint})")
            worst = max(worst, 1)
            continue
        if not args.json:
            console.print(f"running {spec.scenario} {spec.mode} …")
        with LiveProgress(enabled=show) as bar:
            record = execute(spec, bar)
        records.append({**record.data, "run_dir": str(record.run_dir)})
        worst = max(worst, record.exit_code)
    if args.json:
        print_json(records)
        return worst
    console.print(results_table(records, title="mlharness demo — UCI digits MLP, onnxruntime, "
                                               "--test length, measured targets"))
    console.print(f"run directories: {args.output_dir}/demo/ (probes: {args.output_dir}/_tune/)")
    console.print("[dim]--test runs are short (2 s): good for checking a set-up, not valid for a "
                  "submission. Find targets for full runs with: mlharness tune --help[/]")
    return worst
