"""``mlharness runs``: list the runs the result index knows; ``runs reindex`` rebuilds it."""

from __future__ import annotations

import argparse
import sqlite3
from dataclasses import asdict
from datetime import date, datetime, timezone
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from mlharness.cli.render import console, print_json
from mlharness.errors import ConfigError
from mlharness.names import accuracy_text
from mlharness.report.names import check_benchmark, check_scenario
from mlharness.store import IndexedRun, Store, open_store
from mlharness.store.index import RUN_BUSY_TIMEOUT_S, index_path, locked

EXAMPLES = """examples:
  mlharness runs                                   # every run under runs/, oldest first
  mlharness runs --benchmark demo --scenario Offline --valid
  mlharness runs --since 2026-11-01 --json         # for scripts
  mlharness runs --all                             # also compliance audits and tune probes
  mlharness runs -b llama3.1-8b -s Interactive     # an LLM's runs: tok/s, TTFT/TPOT p99 vs limits
  mlharness runs reindex                           # rebuild runs/mlharness.sqlite from the run dirs

The index (runs/mlharness.sqlite) is a cache of the run directories' run.json files: a missing,
stale or corrupt index is rebuilt from them. A run shown as "crashed" never finished: its
process is gone and it is never used as a result.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("runs", help="list recorded runs (the result index); `runs reindex`",
                       description="List the runs recorded in the result index "
                       "(<runs-dir>/mlharness.sqlite), or rebuild it from the run directories.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", nargs="?", choices=("list", "reindex"), default="list",
                   help="list (default) or reindex")
    p.add_argument("--runs-dir", type=Path, default=Path("runs"), metavar="DIR",
                   help="the runs folder (default runs/)")
    p.add_argument("--benchmark", "-b", metavar="NAME")
    p.add_argument("--scenario", "-s", metavar="NAME")
    p.add_argument("--mode", choices=("performance", "accuracy"))
    p.add_argument("--valid", action="store_true",
                   help="only finished runs that are VALID (performance) or met the target (accuracy)")
    p.add_argument("--since", metavar="DATE", type=_since,
                   help="only runs started on or after DATE (YYYY-MM-DD or ISO time, UTC)")
    p.add_argument("--all", action="store_true", help="include compliance audits and tune probes")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(func=runs_command)


def _since(text: str) -> str:
    try:
        if len(text) == 10:
            return date.fromisoformat(text).isoformat()
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date: {text!r} (use YYYY-MM-DD)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).isoformat(timespec="seconds")


def runs_command(args: argparse.Namespace) -> int:
    root = args.runs_dir
    if args.action == "reindex":
        if not root.is_dir():
            raise ConfigError(f"no runs folder at {root}", hint="pass --runs-dir DIR")
        try:
            with Store(root, busy_timeout=RUN_BUSY_TIMEOUT_S) as store:
                count = store.count() if store.rebuilt else store.reindex()
        except sqlite3.OperationalError as exc:
            if not locked(exc):
                raise
            raise ConfigError(f"the index {index_path(root.resolve())} is locked by another "
                              f"process ({exc}): not rebuilt",
                              hint="try again when that process is done (a run holds it for "
                              "moments); `mlharness runs` reads the run directories meanwhile"
                              ) from None
        console.print(f"indexed {count} run directories into {store.path}")
        return 0
    if not root.is_dir():
        raise ConfigError(f"no runs folder at {root}",
                          hint="run something first (mlharness demo) or pass --runs-dir DIR")
    with open_store(root) as store:
        if args.benchmark:
            check_benchmark(args.benchmark, store.benchmarks())
        check_scenario(args.scenario)
        rows = store.query(benchmark=args.benchmark, scenario=args.scenario, mode=args.mode,
                           valid=args.valid or None, since=args.since,
                           kinds=None if args.all else ("run",))
    if args.json:
        print_json([asdict(r) for r in rows])
        return 0
    console.print(runs_table(rows, f"{len(rows)} run(s) in {escape(str(root))}"))
    return 0


def runs_table(rows: list[IndexedRun], title: str) -> Table:
    """One row per run; why a run is not trusted (damaged, crashed, failed) goes in numbered
    notes below."""
    table = Table(title=title, title_justify="left")
    tokens = any(r.ttft_p99_ms is not None or r.tpot_p99_ms is not None for r in rows)
    batches = not tokens or any(r.batch_size for r in rows)  # LLM runs have none
    columns = ["started (UTC)", "scenario", "mode", *(["batch"] if batches else []), "result",
               "verdict", "run directory"]
    if tokens:  # the LLM runs: time to first token and per output token, p99 / limit (ms)
        columns[-2:-2] = ["TTFT, TPOT p99/lim ms"]
    for col in columns:
        table.add_column(col, no_wrap=col != "run directory", overflow="fold")
    notes: list[str] = []
    for r in rows:
        verdict = _verdict(r)
        if r.state not in ("ok", "running") and r.reasons:
            notes.append(f"{r.path}: not trusted: {'; '.join(r.reasons)}")
            verdict += f" [{len(notes)}]"
        table.add_row(escape((r.started or "")[5:16].replace("T", " ")),
                      escape(r.scenario),
                      _MODE.get(r.mode, r.mode) + ("" if r.kind == "run" else f" ({r.kind})"),
                      *([str(r.batch_size or "-")] if batches else []), escape(_result(r)),
                      *([tokens_text(r)] if tokens else []),
                      verdict, escape(r.path))
    if notes:
        table.caption = "\n".join(escape(f"[{i}] {n}") for i, n in enumerate(notes, 1))
        table.caption_justify = "left"
    return table


_MODE = {"performance": "perf", "accuracy": "acc"}


def _result(r: IndexedRun) -> str:
    if r.mode == "accuracy" and r.accuracy is not None:
        return accuracy_text(r.accuracy_metric, r.accuracy)
    if r.value is None:
        return "-"
    return value_text(r.value, r.unit)


def value_text(value: float, unit: str | None) -> str:
    """A result with its unit, short: ms, samples/s, QPS done (Server), tok/s (an LLM's
    Offline) or tok/s done (an LLM's Server and Interactive: completed tokens)."""
    unit = unit or ""
    if "ms" in unit:
        return f"{value:,.3f} ms"
    done = " done" if unit.startswith("completed") else ""
    if "tokens" in unit:
        return f"{value:,.1f} tok/s{done}"
    return f"{value:,.1f} " + ("QPS done" if done else "samples/s")


def tokens_text(r: IndexedRun) -> str:
    """``20.4/500, 5.02/30``: TTFT and TPOT p99 against their limits (ms), or -."""
    if r.ttft_p99_ms is None and r.tpot_p99_ms is None:
        return "-"
    return f"{token_text(r, 'ttft')}, {token_text(r, 'tpot')}"


def token_text(r: IndexedRun, name: str) -> str:
    """``20.4/500``: a run's token latency p99 against its limit (ms), or -."""
    tokens = r.tokens_ms
    p99, limit = tokens[f"{name}_p99_ms"], tokens[f"{name}_limit_ms"]
    if p99 is None:
        return "-"
    return f"{p99:,.3g}" + (f"/{limit:,.0f}" if limit is not None else "")


def _verdict(r: IndexedRun) -> str:
    state = r.state
    if state == "damaged":
        return "[red]DAMAGED[/]"
    if state == "crashed":
        return "[red]CRASHED[/] (never finished)"
    if state == "running":
        return "[yellow]running[/]"
    if state != "ok":
        return f"[red]{state.upper()}[/]"
    verdict = r.verdict or "-"  # the record's own (RunRecord.verdict), kept by the index
    colour = {"VALID": "green", "PASS": "green", "INVALID": "red", "FAIL": "red"}.get(verdict)
    return f"[{colour}]{verdict}[/]" if colour else verdict
