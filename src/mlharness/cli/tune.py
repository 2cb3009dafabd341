"""``mlharness tune``: measure the targets (and engine settings) that give VALID runs at peak."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from mlharness.cli.render import LiveProgress, console, console_err, print_json
from mlharness.cli.run import add_run_arguments, spec_from_args
from mlharness.cli.spec_flags import add_flag, run_settings
from mlharness.errors import ConfigError
from mlharness.hostinfo import describe_system
from mlharness.names import QPS_SCENARIOS, Scenario
from mlharness.rules.loader import DEFAULT_ROUND, ROUNDS
from mlharness.spec import RunSpec, load_toml

if TYPE_CHECKING:  # tune itself (and rich's tables) are imported when the command runs
    from rich.table import Table

    from mlharness.tune.probe import Point
    from mlharness.tune.scenario import Tuned

EXAMPLES = """\
examples:
  mlharness tune -b demo                                  # all four scenarios, show the table
  mlharness tune -b demo -s Server --sut mybox            # write suts/mybox.toml
  mlharness run  -b demo -s Server --sut mybox --valid    # ... and use it
  mlharness tune -b resnet50 -m resnet50.onnx -d imagenet -s Offline \\
      --search batch_size=1,8,32 workers=1,2 --sut mybox
  mlharness tune -b demo -s SingleStream --json
  mlharness tune -b llama3.1-8b -s Server,Interactive --backend openai \\
      --endpoint http://localhost:8000 --dataset cnn_eval.json --sut mybox

What is measured (short probe runs of the real harness, kept under <output-dir>/_tune/):
  SingleStream/MultiStream  per-query latency -> expected latency for user.conf (x 0.5)
  Offline                   fastest sustained samples/s -> target QPS (x 1.5)
  Server                    highest VALID target QPS under the benchmark's latency bound
                            (grow x4 until INVALID, then bisect to 5%) -> target (x --margin),
                            then held for --confirm seconds (stepping down x --margin if INVALID)
  Server, Interactive       (LLMs) the same, VALID meaning TTFT p99 and TPOT p99 within their
                            limits; each probe >= 460 queries (early stopping on both), and
                            the limit an INVALID probe broke steers the next rate
The scenarios of "all": SingleStream, MultiStream, Server, Offline; an LLM benchmark's own
(Offline, Server, Interactive; llama3.1-8b-edge: SingleStream, Offline).
With --search, every combination of engine settings is tuned and the best one kept.

exit codes: 0 every scenario got a target, 1 some scenario found no VALID point,
            2 bad input (message + hint), 3 a probe run failed
"""

SCENARIOS = tuple(Scenario)
CONFIRM_S = 60.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tune", help="measure the targets for VALID runs at peak performance",
        description="Find, with short runs of the real harness and LoadGen, the target each "
                    "scenario needs (expected latency, Offline QPS, the highest VALID Server "
                    "or Interactive QPS), optionally over a grid of engine settings, and write "
                    "them to a named SUT configuration that `mlharness run --sut NAME` uses.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(p)
    _tune_help(p)
    t = p.add_argument_group("tuning")
    t.add_argument("--search", nargs="+", metavar="KEY=V1,V2",
                   help="engine settings to try, e.g. batch_size=1,8,32 workers=1,2")
    t.add_argument("--margin", type=float, metavar="F",
                   help="Server: target = best VALID QPS x F (default 0.8)")
    t.add_argument("--confirm", type=float, default=CONFIRM_S, metavar="SECONDS",
                   help=f"Server: hold the chosen target this long, stepping down by the margin "
                        f"until VALID (default {CONFIRM_S:g}; 0 skips; short probes see a burst "
                        "capacity a 600 s run does not sustain)")
    add_flag(t, run_settings()["round"], choices=ROUNDS,
             help=f"round whose seeds the probes use (default: the installed LoadGen's, "
                  f"{DEFAULT_ROUND})")
    t.add_argument("--quick", action="store_true",
                   help="coarser, faster search with wider margins, no --confirm")
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print every point and choice as JSON")
    out.add_argument("--no-progress", action="store_true", help="no live progress display")
    p.set_defaults(func=tune_command)


#: run settings tune does not take: it measures the targets, and its probes are short --test
#: runs whose durations and query counts the search sets (tune/server.py, offline.py, latency.py)
NOT_TUNE_SETTINGS = ("valid", "target_qps", "target_latency", "min_duration", "min_query_count",
                     "max_query_count")


def _tune_help(p: argparse.ArgumentParser) -> None:
    """The run flags as tune reads them: --scenario takes a list (default all four), --sut names
    the configuration written, and the run flags tune ignores are not offered at all."""
    p._option_string_actions["--scenario"].help = (
        "SingleStream, MultiStream, Server, Offline, Interactive (LLMs), a comma-separated list "
        "of them, or all (default all four); for an LLM benchmark all is its own scenarios "
        "(Offline, Server, Interactive; llama3.1-8b-edge: SingleStream, Offline)")
    p._option_string_actions["--sut"].help = (
        "write the targets and engine settings measured to this SUT configuration "
        "(suts/NAME.toml or a path)")
    for action in [a for a in p._actions if a.dest in NOT_TUNE_SETTINGS]:
        for option in action.option_strings:
            del p._option_string_actions[option]
        p._actions.remove(action)
        for group in [*p._action_groups, *p._mutually_exclusive_groups]:
            if action in group._group_actions:
                group._group_actions.remove(action)
    p._mutually_exclusive_groups[:] = [g for g in p._mutually_exclusive_groups
                                       if g._group_actions]


def _scenarios(text: str | None, benchmark: str) -> list[str]:
    # lazy: tune (probes, the runner; ~65 modules) stays out of `mlharness --help`
    from mlharness.tune.scenario import benchmark_scenarios

    if text is None or text.lower() == "all":
        return list(benchmark_scenarios(benchmark))
    by_lower = {s.lower(): s for s in SCENARIOS}
    chosen = [by_lower.get(part.strip().lower()) for part in text.split(",")]
    if None in chosen:
        raise ConfigError(f"unknown scenario in {text!r}",
                          hint="choose from " + ", ".join(SCENARIOS) + ", or all")
    return [s for s in chosen if s]


def _benchmark(args: argparse.Namespace) -> str:
    """The benchmark named by -b, else by the --config TOML file (empty if neither names one)."""
    if args.benchmark or not getattr(args, "config", None):
        return str(args.benchmark or "")
    return str(load_toml(args.config).get("benchmark") or "")


def point_line(point: Point) -> str:
    """One probe as a line: scenario, target, what it measured, verdict (and why not VALID: the
    token limit it broke, in words)."""
    qps = point.scenario in QPS_SCENARIOS
    target = f"target {point.target:,.1f} QPS" if qps else f"hint {point.target:.4g} ms"
    value = _value_text(point)
    if point.ttft_p99_ms is not None and point.tpot_limit_ms is not None and qps \
            and point.scenario != "Offline":
        p99 = f", TTFT p99 {_token(point, 'TTFT')}, TPOT p99 {_token(point, 'TPOT')}"
    else:
        p99 = f", p99 {point.p99_ms:.3g} ms" if point.p99_ms is not None else ""
    why = point.why() if point.verdict in ("INVALID", "BEHIND") else ""
    return f"{point.scenario} {target}: {value}{p99} {point.verdict}" + (f" ({why})" if why
                                                                        else "")


def _value_text(point: Point) -> str:
    """What a probe measured: samples/s (and a token run's tokens/s), or latency ms."""
    if point.value is None:
        return "-"
    if point.scenario not in QPS_SCENARIOS:
        return f"{point.value:.4g} ms"
    tokens = f" ({point.tokens_per_s:,.0f} tok/s)" if point.tokens_per_s is not None else ""
    return f"{point.value:,.1f}/s{tokens}"


def _token(point: Point, name: str) -> str:
    """``12.3/30 ms``: a token latency's p99 against its limit."""
    p99, limit = point.token_p99(name), point.token_limit(name)
    if p99 is None:
        return "-"
    if point.scenario not in ("Server", "Interactive"):
        limit = None  # LoadGen logs its defaults there: no limit applies
    return f"{p99:,.4g}" + (f"/{limit:,.0f}" if limit is not None else "") + " ms"


def tune_command(args: argparse.Namespace) -> int:
    # lazy: tune (probes, the runner; ~65 modules) stays out of `mlharness --help`
    from mlharness.runner import checked_task
    from mlharness.tune import SutEntry, save_sut, tune_scenario
    from mlharness.tune.grid import best_of, grid_specs, parse_search
    from mlharness.tune.sutconfig import open_or_new

    axes = parse_search(args.search)
    scenarios = _scenarios(args.scenario, _benchmark(args))
    if args.margin is not None and not 0 < args.margin <= 1:
        raise ConfigError(f"--margin must be in (0, 1], got {args.margin}", hint="e.g. 0.8")
    if args.confirm < 0:
        raise ConfigError(f"--confirm must be >= 0 seconds, got {args.confirm:g}",
                          hint="e.g. 60, or 0 to skip")
    base = spec_from_args(args, scenario=scenarios[0], mode="performance", valid=False, sut=None,
                          target_qps=None, target_latency=None)
    checked_task(base)  # a bad input is refused before the first probe
    sut = open_or_new(args.sut) if args.sut else None
    show = not args.no_progress and not args.json  # a bar on a terminal, else lines
    chosen, tried = [], []
    with LiveProgress(enabled=show) as bar:
        def on_point(point: Point) -> None:
            if not args.json:
                settings = " ".join(f"{k}={v}" for k, v in point.settings.items()
                                    if k in axes)
                console_err.print(escape(f"  {point_line(point)}" + (f" [{settings}]" if settings
                                                                      else "")), highlight=False)

        def tune_one(spec: RunSpec) -> Tuned:
            if not args.json:
                console_err.print(escape(f"tuning {spec.benchmark} {spec.scenario} …"))
            return tune_scenario(spec, quick=args.quick, margin=args.margin,
                                 confirm_ms=int(args.confirm * 1000), progress=bar,
                                 on_point=on_point)

        for scenario in scenarios:
            best, results = best_of(grid_specs(base.replace(scenario=scenario), axes), tune_one)
            tried.extend(results)
            chosen.append(best or results[0])
    host = describe_system().get("hostname") if sut is not None else None
    path = None
    if sut is not None:
        for tuned in chosen:
            if tuned.target is None:
                continue
            sut.set_entry(tuned.benchmark, tuned.scenario, SutEntry(
                **{tuned.field: tuned.target}, settings=tuned.settings, measured=tuned.measured,
                measured_at=tuned.measured_at, method=tuned.method, host=host))
        path = save_sut(sut, args.sut)
    failed = any(t.target is None for t in chosen)
    if args.json:
        print_json({"sut": str(path) if path else None,
                    "chosen": [_tuned_dict(t) for t in chosen],
                    "tried": [_tuned_dict(t) for t in tried]})
        return 1 if failed else 0
    console.print(points_table(tried))
    console.print(chosen_table(chosen))
    for line in outcome_lines(chosen, args.sut, path, base.benchmark):
        console.print(line, highlight=False)
    return 1 if failed else 0


def outcome_lines(chosen: list[Tuned], sut: str | None, path: Path | None,
                  benchmark: str) -> list[str]:
    """What tune found, said plainly: the configuration written and how to use it for the
    scenarios with a VALID point; for each without one, that none was found and what to do."""
    done = [t.scenario for t in chosen if t.target is not None]
    lines = []
    if path:
        what = ", ".join(done) if done else "no targets"
        lines.append(escape(f"SUT configuration written: {path} ({what})"))
        if done:
            scenario = done[0] if len(done) == 1 else "SCENARIO"
            lines.append(escape(f"use it: mlharness run -b {benchmark} -s {scenario} --sut {sut} "
                                "--valid"))
    for t in chosen:
        if t.target is None:
            kept = f"; {sut} has no target for it" if path else ""
            if t.note:
                lines.append(escape(f"no VALID point found for {t.scenario}{kept}: {t.note}"))
            elif any(p.tokens for p in t.points):
                lines.append(escape(
                    f"no VALID point found for {t.scenario}{kept}: every probe above was "
                    "INVALID (see why: TTFT over its limit means prompts wait for the server, "
                    "TPOT that too many streams share its decode steps); give the server more "
                    "capacity or check it is the model the benchmark names, then tune again"))
            else:
                lines.append(escape(
                    f"no VALID point found for {t.scenario}{kept}: every probe above was INVALID "
                    "(see why); lower the load (smaller --batch-size, fewer --workers) or check "
                    "the latency bound (--server-latency), then tune again"))
        elif t.note:
            lines.append(escape(f"{t.scenario}: {t.note}"))
    return lines


def _tuned_dict(tuned: Tuned) -> dict[str, Any]:
    data = asdict(tuned)
    data["field"] = tuned.field
    return data


def points_table(tried: list[Tuned]) -> Table:
    """Every probe tune ran, in order."""
    from rich.table import Table

    table = Table(title="every point tried", title_justify="left")
    tokens = any(p.tokens for t in tried for p in t.points)
    columns = ["scenario", "settings", "target", "measured", "p99 ms", "verdict", "why"]
    if tokens:  # the LLMs: time to first token and per output token, p99 / limit
        columns[4:5] = ["TTFT ms p99/lim", "TPOT ms p99/lim"]
    for col in columns:
        table.add_column(col, no_wrap=col != "why")
    for tuned in tried:
        settings = _settings_text(tuned.settings)
        for p in tuned.points:
            qps = p.scenario in QPS_SCENARIOS
            latency = ([_token(p, "TTFT").removesuffix(" ms"), _token(p, "TPOT").removesuffix(" ms")]
                       if tokens else ["-" if p.p99_ms is None else f"{p.p99_ms:.3g}"])
            table.add_row(p.scenario, settings,
                          f"{p.target:,.1f} QPS" if qps else f"{p.target:.4g} ms",
                          escape(_value_text(p)), *latency,
                          "[green]VALID[/]" if p.valid else f"[red]{escape(p.verdict)}[/]",
                          "" if p.valid else escape(p.why()))
    return table


def chosen_table(chosen: list[Tuned]) -> Table:
    """What tune chose per scenario."""
    from rich.table import Table

    table = Table(title="chosen targets", title_justify="left")
    for col in ("scenario", "target", "measured", "settings", "how"):
        table.add_column(col, no_wrap=col not in ("how",))
    for t in chosen:
        qps = t.field == "target_qps"
        target = "[red]none VALID[/]" if t.target is None else (
            f"--target-qps {t.target:g}" if qps else f"--target-latency {t.target:g}")
        measured = "-" if t.measured is None else (
            f"{t.measured:,.1f} QPS" if qps else f"{t.measured:.4g} ms")
        table.add_row(t.scenario, target, measured, _settings_text(t.settings), escape(t.method))
    return table


def _settings_text(settings: dict[str, Any]) -> str:
    """Engine settings that differ from RunSpec's defaults (the SUT file keeps them all),
    escaped for the tables."""
    defaults = {name: f.default for name, f in RunSpec.model_fields.items()}
    return escape(" ".join(f"{k}={v}" for k, v in settings.items()
                           if defaults.get(k) != v) or "defaults")
