"""``mlharness run``: one LoadGen test (a scenario in performance or accuracy mode)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.markup import escape

from mlharness import rules
from mlharness.cli.render import (LiveProgress, console, console_err, power_lines, print_json,
                                  results_table)
from mlharness.cli.spec_flags import TABLE_KEYS, add_flag, add_shared_flags, run_settings
from mlharness.distribution import Distribution
from mlharness.errors import ConfigError
from mlharness.flags import WHAT, WHERE
from mlharness.options import parse_scalar
from mlharness.record import RunRecord
from mlharness.spec import LEGACY_POOL_BACKENDS, RunSpec, load_toml
from mlharness.tasks import BENCHMARKS

EXAMPLES = """\
examples:
  mlharness run --benchmark demo --scenario Offline --target-qps 20000
  mlharness run --benchmark demo --scenario Server --target-qps 300 --test
  mlharness run --benchmark demo --scenario SingleStream --target-latency 0.05
  mlharness run --benchmark demo --mode accuracy
  mlharness run --benchmark resnet50 --model resnet50_v1.onnx --dataset imagenet-val \\
      --scenario Offline --target-qps 400 --valid
  mlharness run --config run.toml --json
  mlharness run -b demo -s Server --target-qps 300 \\
      --endpoint http://127.0.0.1:8101 --endpoint http://127.0.0.1:8102   # `mlharness serve` nodes
  mlharness run -b demo -s Offline --replicas 2                         # Ray actors
  mlharness run --benchmark demo --scenario Offline --target-qps 20000 \\
      --power --power-server 192.168.1.2:4950 --ntp 192.168.1.2     # MLPerf power (docs/power.md)
  mlharness run --benchmark demo --energy rapl      # RAPL energy estimate, not an MLPerf result
  mlharness run --benchmark demo --scenario Server --sut mybox --valid  # targets from suts/mybox.toml
  mlharness run -b llama3.1-8b -s Interactive --target-qps 2 --dataset cnn_eval.json \
      --backend openai --endpoint http://127.0.0.1:8000 \
      --backend-option served_model=meta-llama/Llama-3.1-8B-Instruct   # an LLM server (docs/llm.md)
  mlharness run -b llama3.1-8b -s Offline --mode accuracy --dataset cnn_eval.json \
      --backend hf --model ./Llama-3.1-8B-Instruct     # transformers in this process, ROUGE offline

A --test run without a target measures it first (short probe runs under <output-dir>/_tune/);
a --valid run needs one: a number, a SUT configuration written by `mlharness tune --sut NAME`,
or 'auto' (measured first).

Every value also goes in a TOML file (--config): the key is the flag without its dashes
(top level or a [run] table), one name per setting, e.g.
  benchmark = "demo"
  scenario = "Server"
  target_qps = 300            # --target-qps
  server_latency = 200        # --server-latency (ms)
  valid = true                # --valid (false/absent: --test)
  stall_timeout = 120         # --stall-timeout (s)
  [run.set]                   # --set KEY=VALUE (user.conf keys LoadGen reads)
  max_async_queries = 1
  [run.task_option]           # --task-option KEY=VALUE
  label_offset = 0
  [run.backend_option]        # --backend-option KEY=VALUE
  graph_optimization = "basic"
Flags given on the command line override the file. Values are checked before anything runs:
numbers finite and in range, names from their lists, unknown keys refused.

LoadGen settings, highest precedence first: a flag or --set (never both for one key), a SUT
configuration, the --test short-run values, mlperf.conf (compiled into LoadGen), LoadGen's
defaults. run.json keeps each value with its source (settings.sources).

exit codes: 0 VALID / accuracy target met, 1 INVALID / target missed / LoadGen errors,
            2 bad input (message + hint), 3 the run failed (backend raised, worker died, stall,
            a node or Ray actor lost without --failover)
"""


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The flags that describe one run; shared by run, compliance and tune. Each comes from its
    RunSpec field (``cli/spec_flags.py``); only --config and the old --replica-backend are not
    settings."""
    groups = {WHAT: p.add_argument_group(WHAT)}
    groups[WHAT].add_argument("--config", type=Path, metavar="TOML",
                              help="TOML file with run settings")
    add_shared_flags(p, groups)
    groups[WHERE].add_argument("--replica-backend", metavar="NAME",
                               help="ray: the same as --backend (kept for earlier command lines)")


def spec_from_args(args: argparse.Namespace, **overrides: Any) -> RunSpec:
    """TOML file first, then the flags that were given, then ``overrides``."""
    return given_spec(args, **overrides)[0]


def given_spec(args: argparse.Namespace, **overrides: Any) -> tuple[RunSpec, set[str]]:
    """The spec (as :func:`spec_from_args`) and the fields the user set in the TOML file or by
    flags, which a SUT configuration does not override."""
    data = _spec_mapping(args)
    given = set(data)
    data.update(overrides)
    if "benchmark" not in data:
        raise ConfigError("no benchmark given", hint="pass --benchmark demo (or see --help)")
    return RunSpec.from_mapping(_from_cache(data)), given


def _from_cache(data: dict[str, Any]) -> dict[str, Any]:
    """The benchmark's official model/dataset/vocab from the cache (`mlharness get`) where the
    command gives no path, or gives a catalogue name (``-d imagenet``)."""
    # lazy: artefacts (http, ssl; ~30 modules) and the backends stay out of `mlharness --help`
    from mlharness.artefacts.for_run import fill_from_cache
    from mlharness.backends import model_framework_of

    backend = data.get("backend", RunSpec.model_fields["backend"].default)
    data, notes = fill_from_cache(data, model_framework_of(str(backend)))
    for note in notes:
        console_err.print(escape(note), highlight=False, soft_wrap=True)
    return data


def _spec_mapping(args: argparse.Namespace) -> dict[str, Any]:
    """The RunSpec fields from the TOML file, then the flags that were given."""
    data: dict[str, Any] = load_toml(args.config) if getattr(args, "config", None) else {}
    section = data.get("distribution", {})
    if not isinstance(section, dict):
        raise ConfigError("distribution in the TOML must be a table",
                          hint="e.g. [run.distribution] with kind = \"ray\" and replicas = 2")
    distribution: dict[str, Any] = {}
    for key, setting in run_settings().items():
        value = getattr(args, key, None)
        if value is None:
            continue
        if setting.model is Distribution:
            distribution[key] = str(value.resolve()) if isinstance(value, Path) else value
        elif key in TABLE_KEYS:
            table = data.get(key, {})
            if not isinstance(table, dict):
                raise ConfigError(f"{key} in the TOML must be a table of KEY = VALUE",
                                  hint=f"e.g. [run.{key}] with one key per line")
            data[key] = {**table, **{k: parse_scalar(v) if isinstance(v, str) else v
                                   for k, v in value}}
        else:
            data[key] = value
    if distribution:
        data["distribution"] = {**section, **distribution}
    if getattr(args, "replica_backend", None):  # the earlier spelling of --backend for Ray
        if data.get("backend") in LEGACY_POOL_BACKENDS:  # --backend ray: the kind it meant
            data["distribution"] = {"kind": data["backend"], **data.get("distribution", {})}
        data["backend"] = args.replica_backend
    return data


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run", help="run one LoadGen test (scenario x mode)",
        description="Run one MLPerf test with the official LoadGen and keep its logs in a new "
                    "run directory (runs/<benchmark>/<scenario>-<mode>-<time>/).",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(p)
    settings = run_settings()
    add_flag(p, settings["mode"])
    round_rules = p.add_argument_group("round rules (checked before --valid runs)")
    add_flag(round_rules, settings["round"])
    round_rules.add_argument("--division", choices=("closed", "open"), default="closed",
                       help="division the run is meant for (default closed)")
    round_rules.add_argument("--no-preflight", action="store_true",
                       help="run a --valid test even if it cannot count for the round")
    add_power_arguments(p)
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print run.json to stdout")
    out.add_argument("--no-progress", action="store_true", help="no live progress display")
    p.set_defaults(func=run_command)


def add_power_arguments(p: argparse.ArgumentParser) -> None:
    power = p.add_argument_group("power (docs/power.md)")
    power.add_argument("--power", action="store_true",
                       help="measure power with the official MLCommons power client and server "
                            "(ranging + testing run)")
    power.add_argument("--power-server", metavar="HOST[:PORT]",
                       help="the MLCommons power server on the director (port default 4950)")
    power.add_argument("--ntp", metavar="HOST",
                       help="NTP server both sides sync with (default: the power server's host)")
    power.add_argument("--power-settle", type=float, default=0.0, metavar="S",
                       help="seconds to wait before each of the two runs (default 0)")
    power.add_argument("--power-dev", type=Path, metavar="PATH",
                       help="checkout of github.com/mlcommons/power-dev (default $MLPERF_POWER_DEV, "
                            "else the installed mlcommons-power package)")
    power.add_argument("--energy", choices=("rapl",),
                       help="record a RAPL (and NVML) energy estimate during the run: "
                            "informational, not an MLPerf power result")


def power_options(args: argparse.Namespace) -> Any:
    """PowerOptions from the flags, or None without --power."""
    if not getattr(args, "power", False):
        if getattr(args, "power_server", None):
            raise ConfigError("--power-server given without --power",
                              hint="add --power to measure power")
        return None
    # lazy: power.session (the runner; ~60 modules) stays out of `mlharness --help`
    from mlharness.power.session import PowerOptions

    if not args.power_server:
        raise ConfigError("--power needs --power-server HOST[:PORT]",
                          hint="the director running the MLCommons power server, e.g. "
                               "--power-server 192.168.1.2:4950")
    return PowerOptions(server=args.power_server, ntp=args.ntp, settle_s=args.power_settle,
                        power_dev=args.power_dev)


def run_command(args: argparse.Namespace) -> int:
    # lazy: the runner and tune (~65 modules) stay out of `mlharness --help`
    from mlharness.runner import execute
    from mlharness.tune.resolve import without_auto

    if args.round is not None:
        rules.load(args.round)  # an unknown round is refused for every benchmark, the demo too
    power = power_options(args)
    if power is not None:
        # lazy: power.session (the runner; ~60 modules) stays out of `mlharness --help`
        from mlharness.power.session import prepare

        prepare(power)  # refuse early (no official client, bad address) before any probe run
    meter = None
    if getattr(args, "energy", None):  # refuse early (no counters) before any probe run
        # lazy: power.energy and its metric (~4 ms) stay out of `mlharness --help`
        from mlharness.power.energy import EnergyMeter

        meter = EnergyMeter.open(args.energy)
    given, explicit = given_spec(args)
    check = given.valid and not args.no_preflight
    if check:  # before any measuring: refuse what cannot count anyway
        refuse_if_not_countable(without_auto(given), args.round, args.division)
    spec = resolved_spec(given, explicit, quiet=args.json, progress=not args.no_progress)
    if check and spec != given:  # the measured target or SUT settings, checked too
        refuse_if_not_countable(spec, args.round, args.division)
    try:
        if meter:
            meter.start()
        if power is not None:
            # lazy: power.session (the runner; ~60 modules) stays out of `mlharness --help`
            from mlharness.power.session import run_power

            say = (lambda text: None) if args.json else (
                lambda text: console_err.print(f"[bold]power:[/] {escape(text)}", highlight=False))
            record = run_power(spec, power, say)
        else:
            with LiveProgress(enabled=not args.no_progress and not args.json) as bar:
                record = execute(spec, bar)
    finally:
        if meter:
            meter.stop()
    if meter:
        meter.attach(record.run_dir, record.record)
    if args.json:
        print_json({**record.data, "run_dir": str(record.run_dir)})
        return record.exit_code
    show_record(record.record, record.run_dir)
    return record.exit_code


def resolved_spec(spec: RunSpec, explicit: set[str] | None = None, quiet: bool = False,
                  progress: bool = True) -> RunSpec:
    """``spec`` with its target resolved (mlharness.tune.resolve_targets): a line on what is
    measured and one with the result. The probes' own verdicts (a search crosses the edge on
    purpose) are for `mlharness tune`, which tables them; here they stay in _tune/."""
    # lazy: tune (probes, the runner; ~65 modules) stays out of `mlharness --help`
    from mlharness.tune import resolve_targets

    def notify(text: str) -> None:
        if not quiet:
            console.print(escape(text))

    with LiveProgress(enabled=progress and not quiet) as bar:
        return resolve_targets(spec, explicit=explicit, progress=bar, notify=notify)


def refuse_if_not_countable(spec: RunSpec, round_name: str | None, division: str) -> None:
    """Before a long --valid run of a round benchmark: refuse, with reasons, if it cannot count."""
    if spec.benchmark not in BENCHMARKS or spec.benchmark == "demo":
        return  # not an MLPerf benchmark: nothing to count for
    problems = rules.preflight(spec, rules.load(round_name) if round_name else None, division)
    if problems:
        lines = "; ".join(f"{p.message} (fix: {p.fix})" if p.fix else p.message
                          for p in problems)
        raise ConfigError(f"this --valid run cannot count for the round: {lines}",
                          hint="fix the settings above, or pass --no-preflight to run it anyway")


def show_record(record: RunRecord, run_dir: Path) -> None:
    """The one-screen verdict of one run."""
    console.print(results_table([record], title=f"{record.benchmark} — {run_dir}"))
    for line in power_lines(record):
        console.print(line, highlight=False)
    for note in [*(record.backend or {}).get("notes", []),
                 *(record.sut.notes if record.sut else [])]:
        console.print(f"[yellow]note:[/] {escape(str(note))}", highlight=False)
    verdict, _ = record.verdict()
    dist = record.distributed or {}
    for note in dist.get("notes", []):  # failovers and restarts: a node's words, not markup
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    if verdict == "INVALID" and (dist.get("failed_over") or dist.get("restarts")):
        console.print("[yellow]note:[/] INVALID with a failover or restart in the run: the "
                      "re-issued samples waited for it, so the target may not be the cause",
                      highlight=False)
    if record.status == "failed":
        console.print(f"[red]run failed:[/] {escape(record.error_message or 'unknown error')}")
        console.print(escape(f"  partial logs kept in {run_dir}"))
    elif not record.spec.valid and verdict in ("VALID", "PASS"):
        console.print("[yellow]note:[/] --test run: fine for checking, too short for a submission "
                      "(use --valid)")
    if not record.spec.valid and record.status == "ok":
        short = short_llm_note(record)
        if short:
            console.print(f"[yellow]note:[/] {escape(short)}", highlight=False)


def short_llm_note(record: RunRecord) -> str:
    """How a --test LLM run was made short, and how to run it full length ('' otherwise)."""
    settings = record.settings
    key = "performance_sample_count_override"
    if settings.sources.get(key) != "test-run":
        return ""
    count = settings.values.get(key)
    what = ("samples" if record.spec.scenario == "Offline" else "distinct prompts")
    return (f"--test {record.benchmark} run: {count:g} {what} (performance_sample_count "
            f"{count:g}, not the whole data set mlperf.conf sets), a short trial; --valid (or "
            "--performance-sample-count N) runs the full length")
