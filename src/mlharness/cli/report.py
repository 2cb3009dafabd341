"""``mlharness report``: one self-contained HTML page about runs or a submission."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape

from mlharness.cli.render import console
from mlharness.files import write_text_atomic
from mlharness.report.output import check_output, write_failed
from mlharness.report.sources import read_source

EXAMPLES = """examples:
  mlharness report runs/ --output report.html
  mlharness report runs/ --by batch_size --output report.html
  mlharness report submission/ --output submission.html
  mlharness report runs-before/ runs-after/ --output before-after.html

The page needs nothing else (inline CSS and SVG plots, no script, nothing fetched): the comparison
table, for every performance run its latency percentiles, and, for runs made with --trace, a
latency histogram and latency over time; Server tune probes as QPS/latency points with the
bound; accuracy against target; the system description; the command that repeats each run.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write a self-contained HTML report of runs or a submission",
                       description="Write one HTML file (no network needed to open it) about "
                       "runs folders, run directories or a submission tree.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sources", nargs="+", type=Path, metavar="SOURCE",
                   help="runs folder, run directory, submission tree or results .csv")
    p.add_argument("--output", "-o", type=Path, default=Path("report.html"), metavar="FILE",
                   help="HTML file to write (default report.html); an existing file is replaced "
                        "only if an earlier report wrote it, never inside a run directory")
    p.add_argument("--force", action="store_true",
                   help="replace an --output file that is not an earlier report (never one "
                        "inside a run directory)")
    p.add_argument("--by", choices=("system", "round", "backend", "precision", "batch_size"),
                   help="group the comparison table by this setting")
    p.add_argument("--title", default="mlharness report", help="page title")
    p.set_defaults(func=report_command)


def report_command(args: argparse.Namespace) -> int:
    # lazy: report.html (html, plots; ~8 ms) stays out of `mlharness --help`
    from mlharness.report.html import render

    check_output(args.output, args.sources, force=args.force)
    sources = [read_source(p) for p in args.sources]
    page = render(sources, by=args.by, title=args.title)
    try:
        write_text_atomic(args.output, page)
    except OSError as exc:
        raise write_failed(args.output, exc) from exc
    console.print(escape(f"wrote {args.output} ({len(page) / 1024:,.0f} KiB)"))
    return 0
