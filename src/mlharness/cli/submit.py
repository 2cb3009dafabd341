"""``mlharness submit``: lay runs out as a submission tree, truncate, summarise, pack and check."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape

from mlharness.cli.check import print_problems
from mlharness.cli.render import console
from mlharness.rules import DEFAULT_ROUND, ROUNDS
from mlharness.submission import submit
from mlharness.submission.layout import FORMATS

EXAMPLES = """examples:
  mlharness submit --submitter MyOrg --division open --system my-system --runs runs/ --output submission/
  mlharness submit --submitter MyOrg --division closed --system my-system --runs runs/ \\
      --output submission/ --system-json systems/my-system.json --force
  mlharness check submission/ --official ~/src/inference

  mlharness submit ... --run runs/demo/Offline-performance-20260101-120000 \
      --run runs/demo/Offline-accuracy-20260101-121000     # choose the runs by hand

Per (benchmark, scenario) and mode, submit uses the run given with --run, else the newest --valid
run under --runs, else the newest --test run, and says which it chose and why. Never used as
results: probe runs (under _tune/ or marked as probes), compliance audit runs, runs that did not
finish ok (including ones left at "running" by a crash) and unreadable run.json files; each is
listed with the reason.
Closed/network: audit runs found there are verified against exactly those runs (TEST01/, TEST04/
as the official run_verification.py writes them); --run-audits runs the missing ones first;
earlier verifications under --runs or --compliance are copied when no audit run is there.
Accuracy logs are truncated after that, as the official truncate_accuracy_log.py does. Writes
the tree, submission.tar.gz and summary.{csv,json,xlsx,md} into --output.

--format: the files of each result. auto (default): each benchmark in its reference's format,
the endpoints client's for qwen3-vl-235b-a22b and LoadGen's logs for the rest; endpoints: the
endpoints format for every benchmark the round's checker accepts in it (v6.1: llama3.1-8b(-edge),
gpt-oss-120b, deepseek-r1, qwen3-vl-235b-a22b; the others stay in LoadGen's); loadgen: LoadGen's
logs everywhere. An endpoints-format result is config.yaml, performance/result_summary.json,
accuracy/accuracy_results.json and audit/audit_<test>.json, written from the same runs.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("submit", help="lay out, truncate, pack and check a submission",
                       description="Build an MLPerf Inference submission tree from run directories.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--submitter", required=True, help="organisation name (directory name)")
    p.add_argument("--division", required=True, choices=("open", "closed", "network"))
    p.add_argument("--system", required=True, help="system name (systems/<name>.json)")
    p.add_argument("--runs", type=Path, default=Path("runs"), help="run directories (default runs/)")
    p.add_argument("--run", dest="pinned", type=Path, action="append", default=[], metavar="DIR",
                   help="use this run directory for its benchmark x scenario x mode (repeatable)")
    p.add_argument("--output", type=Path, required=True, help="new directory for the tree")
    p.add_argument("--round", default=DEFAULT_ROUND, choices=ROUNDS, help="default %(default)s")
    p.add_argument("--system-json", type=Path, help="description from `mlharness system detect` "
                   "(default: systems/<system>.json if present, else detected now)")
    p.add_argument("--system-toml", type=Path, help="user fields when detecting now")
    p.add_argument("--compliance", type=Path, action="append", default=[], metavar="DIR",
                   help="more places holding TEST01/ TEST04/ verifications (`mlharness compliance "
                   "--output DIR`); repeatable")
    p.add_argument("--format", dest="result_format", choices=FORMATS, default="auto",
                   help="the results' files: auto (each benchmark as its reference writes them; "
                   "default), loadgen (LoadGen's logs), endpoints (where the checker accepts it)")
    p.add_argument("--run-audits", action="store_true",
                   help="closed/network: run the missing TEST01/TEST04 audits first (each as long "
                   "as its performance run) and verify them")
    p.add_argument("--force", action="store_true",
                   help="replace an --output that an earlier `mlharness submit` wrote (never the "
                   "working directory, a parent of it, a git work tree, or files mlharness did "
                   "not write)")
    p.set_defaults(func=run)


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def run(args: argparse.Namespace) -> int:
    system_json = args.system_json
    default_json = Path("systems") / f"{args.system}.json"
    if system_json is None and args.system_toml is None and default_json.is_file():
        system_json = default_json
    result = submit(args.runs, args.output, args.submitter, args.division, args.system,
                    args.round, system_json, args.system_toml, args.force, args.compliance,
                    args.run_audits, args.pinned, args.result_format)
    lay = result.layout
    if result.replaced:
        console.print(f"[yellow]{escape(result.replaced)}[/]", highlight=False)
    console.print(f"laid out {len(lay.entries)} result(s) under [bold]{escape(str(lay.base))}[/]")
    for e in lay.entries:
        tests = f" + {', '.join(e.tests)}" if e.tests else ""
        short = " [yellow](--test run)[/]" if e.performance.short else ""
        fmt = " (endpoints format)" if e.format == "endpoints" else ""
        console.print(escape(f"  {e.bench_dir}/{e.scenario}: {e.performance.path.name} + "
                             f"{e.accuracy.path.name}{tests}{fmt}") + short, highlight=False)
        for mode, why in e.why.items():
            console.print(escape(f"      {mode}: {why}"), highlight=False, style="dim")
    if result.not_chosen:
        console.print(f"not used ({len(result.not_chosen)}):")
        for path, why in result.not_chosen:
            console.print(escape(f"  {_shown(path)}: {why}"), highlight=False)
    for note in lay.notes:
        console.print(f"  [yellow]note:[/] {escape(note)}", highlight=False)
    for note in result.derived:
        console.print(f"  [yellow]note:[/] {escape(note)}", highlight=False)
    if result.defaulted:
        console.print("  [yellow]system fields left at defaults:[/] " + ", ".join(result.defaulted)
                      + " (set them with --system-toml)", highlight=False)
    for link in result.skipped_links:
        console.print(f"  [yellow]not packed (symlink):[/] {escape(str(link))}", highlight=False)
    console.print(escape(f"archive: {result.archive}"))
    console.print(escape("summary: " + ", ".join(str(p) for p in result.summaries.values())))
    print_problems(result.problems, "mlharness check")
    if not result.problems:
        console.print(f"next: mlharness check {args.output} --official PATH_TO_INFERENCE_CHECKOUT")
    return 1 if result.problems else 0
