"""``mlharness compare``: the seed-000 table of results with Delta rows."""

from __future__ import annotations

import argparse
import csv
import io
import json
from pathlib import Path

from mlharness.errors import ConfigError
from mlharness.report.build import build_comparison
from mlharness.report.table import SAME_SETTINGS, Comparison, cell_text, delta_text

EXAMPLES = """examples:
  mlharness compare --by batch_size                 # every run under runs/, one row per batch size
  mlharness compare runs/demo/Offline-performance-20261123-101500 runs/demo/Offline-performance-20261123-102000
  mlharness compare runs-before/ runs-after/        # two runs folders, one row each
  mlharness compare --by system runs/ other-machine-runs/
  mlharness compare submission/ published.csv       # your tree against published results
  mlharness compare --by batch_size --format csv > table.csv

A row per group, a column per benchmark x scenario with the scenario's official metric
(SingleStream/MultiStream: early-stopping latency in ms, lower is better; Server: completed
queries/s, Offline: samples/s, higher is better; the LLMs: tokens/s, completed tokens/s in Server
and Interactive, with TTFT and TPOT p99 against their limits) and a Delta row per group against
the first, in % with "better"/"worse". INVALID results and accuracy misses are marked and never compared ("n/c").
Only finished runs count: crashed or failed runs, audits and tune probes are left out.
"""

FORMATS = ("md", "csv", "json")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="compare runs, run groups, submissions or published results",
                       description="Compare results in one table with Delta rows: run directories, "
                       "runs folders (grouped with --by), submission trees, or a CSV in MLCommons' "
                       "published results layout.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sources", nargs="*", type=Path, metavar="SOURCE",
                   help="run directory, runs folder, submission tree or results .csv "
                        "(default: --runs-dir)")
    p.add_argument("--by", choices=("system", "round", "backend", "precision", "batch_size"),
                   help="group runs by this setting (one row per value)")
    p.add_argument("--runs-dir", type=Path, default=Path("runs"), metavar="DIR",
                   help="runs folder used when no SOURCE is given (default runs/)")
    p.add_argument("--benchmark", "-b", metavar="NAME", help="only this benchmark")
    p.add_argument("--scenario", "-s", metavar="NAME", help="only this scenario")
    p.add_argument("--format", choices=FORMATS, default="md", help="md (default), csv or json")
    p.set_defaults(func=compare_command)


def compare_command(args: argparse.Namespace) -> int:
    sources = args.sources or [args.runs_dir]
    table, notes = build_comparison(sources, by=args.by, benchmark=args.benchmark,
                                    scenario=args.scenario)
    if not table.columns:
        left = [n for n in notes if n.startswith("left out ")]
        why = f" ({left[0]}" + (f"; {len(left) - 1} more" if len(left) > 1 else "") + ")" \
            if left else ""
        raise ConfigError("nothing to compare: no finished performance results in "
                          + ", ".join(map(str, sources)) + why,
                          hint="run some benchmarks first, or drop --benchmark/--scenario")
    if args.format == "json":
        print(json.dumps({**table.to_dict(), "notes": notes}, indent=2))
    elif args.format == "csv":
        print(to_csv(table), end="")
    else:
        print(to_markdown(table, notes))
    return 0


def one_line(text: str) -> str:
    """A cell on one line: newlines, tabs and other control characters become spaces."""
    return " ".join("".join(c if c.isprintable() else " " for c in str(text)).split())


def md_cell(text: str) -> str:
    """A Markdown table cell: one line, pipes escaped, no raw HTML (``<``, ``>`` and ``&`` as
    entities, so a name like ``<script>`` shows as text)."""
    return (one_line(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("\\", "\\\\").replace("|", "\\|"))


def _rows(table: Comparison) -> list[list[str]]:
    head = [table.by] + [c.title for c in table.columns]
    rows = [head]
    for group in table.groups:
        rows.append([group] + [cell_text(table.cells[group].get(c.key)) for c in table.columns])
    for group, _base, deltas in table.deltas:
        label = "Delta" if len(table.groups) == 2 else f"Delta {group}"
        rows.append([label] + [delta_text(deltas[c.key]) for c in table.columns])
    return rows


def to_markdown(table: Comparison, notes: list[str]) -> str:
    rows = [[md_cell(c) for c in r] for r in _rows(table)]
    lines = [" | ".join(rows[0]), "|".join("-" * len(rows[0]))]
    lines += [" | ".join(r) for r in rows[1:]]
    if table.deltas:
        lines.append("")
        lines.append("Delta: change against the first row with a result in the column; latency: "
                     "lower is better, throughput: higher is better; n/c = not compared.")
        if table.same_settings_only:
            lines.append(SAME_SETTINGS)
    lines += [f"[{i}] {md_cell(n)}" for i, n in enumerate(notes, 1)]
    return "\n".join(lines)


def to_csv(table: Comparison) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([[one_line(c) for c in r]
                                                     for r in _rows(table)])
    return buf.getvalue()
