"""``mlharness demo``: the embedded benchmark end to end — four scenarios and an accuracy run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mlharness.cli.render import LiveProgress, console, print_json, results_table

#: the demo's runs; "measured" targets come from short probe runs first (mlharness.tune), so the
#: rows are VALID on a fast machine and a slow one: a latency hint above the real latency runs
#: out of queries, an Offline target below the real throughput finishes early
DEMO_RUNS = (
    {"scenario": "SingleStream", "mode": "performance", "target_latency": "measured"},
    {"scenario": "MultiStream", "mode": "performance", "target_latency": "measured"},
    {"scenario": "Server", "mode": "performance", "target_qps": 300},
    {"scenario": "Offline", "mode": "performance", "target_qps": "measured"},
    {"scenario": "Offline", "mode": "accuracy"},
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo", help="run the embedded demo benchmark end to end",
        description="Run the shipped UCI-digits classifier through the official LoadGen in all "
                    "four scenarios (performance, --test length) plus an accuracy run, and print "
                    "one table. Takes about half a minute; nothing is downloaded.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output-dir", type=Path, default=Path("runs"),
                   help="where run directories go (default runs/)")
    p.add_argument("--json", action="store_true", help="print all run.json records as JSON")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=demo_command)


def demo_command(args: argparse.Namespace) -> int:
    from mlharness.runner import execute
    from mlharness.spec import RunSpec
    from mlharness.loadgen.settings import TEST_MIN_DURATION_MS
    from mlharness.tune import latency_target_ms, offline_target_qps

    records = []
    worst = 0
    show = not args.no_progress and not args.json and sys.stderr.isatty()
    for settings in DEMO_RUNS:
        settings = dict(settings)
        if settings.get("target_qps") == "measured":
            if not args.json:
                console.print("measuring Offline throughput for its target QPS …")
            with LiveProgress(enabled=show) as bar:
                settings["target_qps"] = offline_target_qps(
                    RunSpec(benchmark="demo", output_dir=args.output_dir), bar)
        if settings.get("target_latency") == "measured":
            if not args.json:
                console.print(f"measuring {settings['scenario']} latency for its hint …")
            with LiveProgress(enabled=show) as bar:
                settings["target_latency"] = latency_target_ms(
                    RunSpec(benchmark="demo", scenario=settings["scenario"],
                            output_dir=args.output_dir), TEST_MIN_DURATION_MS, bar)
        spec = RunSpec(benchmark="demo", output_dir=args.output_dir, **settings)
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
                                               "--test length"))
    console.print(f"run directories: {args.output_dir}/demo/")
    console.print("[dim]--test runs are short (2 s): good for checking a set-up, not valid for a "
                  "submission. Try: mlharness run --help[/]")
    return worst
