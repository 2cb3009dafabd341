"""``mlharness run``: one LoadGen test (a scenario in performance or accuracy mode)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.markup import escape

from mlharness.cli.render import (LiveProgress, console, console_err, power_lines, print_json,
                                  results_table, verdict_text)
from mlharness.errors import ConfigError
from mlharness.names import Mode
from mlharness.rules.loader import DEFAULT_ROUND
from mlharness.options import parse_scalar
from mlharness.distribution import FLAGS as DISTRIBUTION_FLAGS
from mlharness.spec import LEGACY_POOL_BACKENDS, RunSpec, load_toml

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


def _key_value(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


def _qps(text: str) -> float | str:
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {text!r}") from None


#: settings given as repeated KEY=VALUE flags (TOML: a table of the same name)
TABLE_KEYS = ("set", "task_option", "backend_option")


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The flags that describe one run; shared by run, compliance and tune."""
    what = p.add_argument_group("what to run")
    what.add_argument("--config", type=Path, metavar="TOML", help="TOML file with run settings")
    what.add_argument("--benchmark", "-b", metavar="NAME", help="demo, resnet50, retinanet, bert-99, bert-99.9, or an LLM: "
                           "llama3.1-8b, llama3.1-8b-edge, llama2-70b-99.9, deepseek-r1, "
                           "gpt-oss-120b")
    what.add_argument("--scenario", "-s", metavar="NAME",
                      help="SingleStream, MultiStream, Server or Offline (default Offline); "
                           "Interactive for the LLMs")
    what.add_argument("--model", "-m", type=Path, metavar="PATH", help="model file (the demo ships its own)")
    what.add_argument("--dataset", "-d", type=Path, metavar="PATH", help="dataset folder or file")
    what.add_argument("--vocab", type=Path, metavar="PATH", help="vocab.txt (BERT)")
    what.add_argument("--backend", metavar="NAME",
                      help="the runtime: onnxruntime (default), openvino, pytorch, noop, or "
                           "module:Class (remote and ray: see --distribute); for the LLMs "
                           "openai (servers at --endpoint) or hf (transformers, --model DIR)")
    what.add_argument("--cache-dir", type=Path, metavar="DIR", help="where pre-processed data is cached")
    what.add_argument("--max-samples", type=int, metavar="N",
                      help="use only the first N dataset samples (not valid for submission)")
    what.add_argument("--sut", metavar="NAME|PATH",
                      help="SUT configuration (suts/NAME.toml or a path) with the targets and "
                           "engine settings `mlharness tune` measured; flags override it")

    lg = p.add_argument_group("LoadGen settings (written into user.conf)")
    length = lg.add_mutually_exclusive_group()
    length.add_argument("--test", dest="valid", action="store_const", const=False,
                        help="short run: 2 s minimum, small query counts (default)")
    length.add_argument("--valid", dest="valid", action="store_const", const=True,
                        help="full-length run under the round's rules (600 s, minimum counts)")
    lg.add_argument("--target-qps", type=_qps, metavar="QPS",
                    help="Server target QPS / Offline expected QPS, or 'auto' (measured by "
                         "short probe runs first; the default of a --test run)")
    lg.add_argument("--target-latency", type=_qps, metavar="MS",
                    help="SingleStream/MultiStream expected latency in ms (a hint: too high "
                         "and LoadGen runs out of queries), or 'auto' (measured first)")
    lg.add_argument("--server-latency", type=float, metavar="MS",
                    help="Server latency bound in ms (open division only)")
    lg.add_argument("--min-duration", type=int, metavar="MS",
                    help="minimum test duration (--test: 2000, --valid: 600000)")
    lg.add_argument("--min-query-count", type=int, metavar="N")
    lg.add_argument("--max-query-count", type=int, metavar="N")
    lg.add_argument("--performance-sample-count", type=int, metavar="N")
    lg.add_argument("--set", dest="set", action="append", type=_key_value,
                    metavar="KEY=VALUE",
                    help="another user.conf key LoadGen reads (e.g. max_async_queries=1); keys "
                         "with their own flag are refused")

    how = p.add_argument_group("how to run it")
    how.add_argument("--batch-size", type=int, metavar="N",
                     help="largest batch (Offline default 32; not for SingleStream)")
    how.add_argument("--workers", type=int, metavar="N", help="worker threads feeding the backend (default 1; remote/ray: 2 per node)")
    how.add_argument("--threads", type=int, metavar="N", help="runtime intra-op threads")
    how.add_argument("--instances", type=int, metavar="N",
                     help="backend instances, each with its own worker and pinned block of cores, kept "
                     "inside a NUMA node where it fits, a thread per physical core first (default 1)")
    how.add_argument("--threads-per-instance", type=int, metavar="M",
                     help="threads of each instance (default: the cores / instances)")
    how.add_argument("--precision", metavar="P", help="fp32 (default), bf16, int8 — never changed silently")
    how.add_argument("--device", metavar="D", help="cpu (default) or cuda")
    how.add_argument("--no-length-sort", dest="length_sort", action="store_const", const=False,
                     help="do not sort Offline samples by length before batching")
    how.add_argument("--warmup", type=int, metavar="N",
                     help="untimed batches per worker before LoadGen starts, so first-call costs "
                          "(kernel JIT, memory pools) stay out of the measurement (performance "
                          "runs; default 1, 0: none)")
    how.add_argument("--task-option", dest="task_option", action="append",
                     type=_key_value, metavar="KEY=VALUE",
                     help="benchmark setting, e.g. label_offset=0 or preprocessing=my.toml "
                          "(unknown keys are refused with the valid ones)")
    how.add_argument("--backend-option", dest="backend_option", action="append",
                     type=_key_value, metavar="KEY=VALUE",
                     help="backend setting, e.g. graph_optimization=basic")
    how.add_argument("--output-dir", type=Path, metavar="DIR", help="where run directories go (default runs/)")
    how.add_argument("--stall-timeout", type=float, metavar="S",
                     help="end the run if nothing completes for this many seconds (default 60)")
    how.add_argument("--trace", action="store_const", const=True,
                     help="write LoadGen's mlperf_log_trace.json")

    dist = p.add_argument_group(
        "where the samples run: this process (default), `mlharness serve` nodes or Ray actors "
        "(docs/distributed.md)")
    dist.add_argument("--distribute", metavar="KIND", choices=("local", "remote", "ray"),
                      help="local, remote (serve nodes) or ray (actors); --endpoint implies "
                           "remote, --replicas or --ray-address imply ray (with --backend "
                           "openai, --endpoint names the LLM servers)")
    dist.add_argument("--endpoint", dest="endpoints", action="append", metavar="URL",
                      help="remote: an `mlharness serve` node, http://HOST:PORT (repeat per node)")
    dist.add_argument("--failover", action="store_const", const=True,
                      help="remote/ray: re-issue a lost node's samples to the others "
                           "(recorded in run.json) instead of failing the run")
    dist.add_argument("--request-timeout", type=float, metavar="S",
                      help="remote/ray: a batch not answered in S seconds means the node "
                           "stalled (default 15)")
    dist.add_argument("--token-file", type=Path, metavar="PATH",
                      help="remote: file holding the nodes' token (default: "
                           "$MLHARNESS_NODE_TOKEN); the token is never written to the run")
    dist.add_argument("--ray-address", metavar="ADDR",
                      help="ray: 'auto', HOST:PORT or ray://HOST:PORT (default: a local Ray)")
    dist.add_argument("--replicas", type=int, metavar="N",
                      help="ray: actors, each running --backend (default 1)")
    dist.add_argument("--max-restarts", type=int, metavar="N",
                      help="ray: restart a killed actor up to N times (default 0: fail fast)")
    dist.add_argument("--replica-cpus", type=float, metavar="N",
                      help="ray: CPUs each actor takes (default 1)")
    dist.add_argument("--replica-gpus", type=float, metavar="N",
                      help="ray: GPUs each actor takes (default 0; 1: a device each)")
    dist.add_argument("--replica-backend", metavar="NAME",
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
    from mlharness.artefacts.for_run import fill_from_cache

    data, notes = fill_from_cache(data)
    for note in notes:
        console_err.print(escape(note), highlight=False, soft_wrap=True)
    return data


#: the flags of the distribution section, by its keys (argparse dests = the section's keys)
_DISTRIBUTION_ARGS = tuple(DISTRIBUTION_FLAGS)


def _spec_mapping(args: argparse.Namespace) -> dict[str, Any]:
    """The RunSpec fields from the TOML file, then the flags that were given."""
    data: dict[str, Any] = load_toml(args.config) if getattr(args, "config", None) else {}
    for key in RunSpec.model_fields:
        value = getattr(args, key, None)
        if value is None or key in TABLE_KEYS or key == "mode":
            continue
        data[key] = value
    for key in TABLE_KEYS:
        pairs = getattr(args, key, None)
        if pairs:
            table = data.get(key, {})
            if not isinstance(table, dict):
                raise ConfigError(f"{key} in the TOML must be a table of KEY = VALUE",
                                  hint=f"e.g. [run.{key}] with one key per line")
            data[key] = {**table, **{k: parse_scalar(v) for k, v in pairs}}
    section = data.get("distribution", {})
    if not isinstance(section, dict):
        raise ConfigError("distribution in the TOML must be a table",
                          hint="e.g. [run.distribution] with kind = \"ray\" and replicas = 2")
    flags = {key: getattr(args, key, None) for key in _DISTRIBUTION_ARGS}
    flags = {k: str(v.resolve()) if isinstance(v, Path) else v
             for k, v in flags.items() if v is not None}
    if getattr(args, "distribute", None):
        flags["kind"] = args.distribute
    if flags:
        data["distribution"] = {**section, **flags}
    if getattr(args, "replica_backend", None):  # the earlier spelling of --backend for Ray
        if data.get("backend") in LEGACY_POOL_BACKENDS:  # --backend ray: the kind it meant
            data["distribution"] = {"kind": data["backend"], **data.get("distribution", {})}
        data["backend"] = args.replica_backend
    mode = getattr(args, "mode", None)
    if mode:
        data["mode"] = mode
    return data


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run", help="run one LoadGen test (scenario x mode)",
        description="Run one MLPerf test with the official LoadGen and keep its logs in a new "
                    "run directory (runs/<benchmark>/<scenario>-<mode>-<time>/).",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(p)
    p.add_argument("--mode", choices=[m.value for m in Mode],
                   help="performance (default) or accuracy")
    rules = p.add_argument_group("round rules (checked before --valid runs)")
    rules.add_argument("--round", metavar="ROUND",
                       help="round whose rules a --valid run must meet and whose seeds LoadGen "
                            f"uses (default {DEFAULT_ROUND}: the installed LoadGen's own seeds; "
                            "v2.1 ... v4.1: docs/rounds.md)")
    rules.add_argument("--division", choices=("closed", "open"), default="closed",
                       help="division the run is meant for (default closed)")
    rules.add_argument("--no-preflight", action="store_true",
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
    from mlharness.power.session import PowerOptions

    if not args.power_server:
        raise ConfigError("--power needs --power-server HOST[:PORT]",
                          hint="the director running the MLCommons power server, e.g. "
                               "--power-server 192.168.1.2:4950")
    return PowerOptions(server=args.power_server, ntp=args.ntp, settle_s=args.power_settle,
                        power_dev=args.power_dev)


def run_command(args: argparse.Namespace) -> int:
    from mlharness.runner import execute

    from mlharness import rules

    if args.round is not None:
        rules.load(args.round)  # an unknown round is refused for every benchmark, the demo too
    power = power_options(args)
    if power is not None:
        from mlharness.power.session import prepare

        prepare(power)  # refuse early (no official client, bad address) before any probe run
    meter = None
    if getattr(args, "energy", None):  # refuse early (no counters) before any probe run
        from mlharness.power.energy import EnergyMeter

        meter = EnergyMeter.open(args.energy)
    from mlharness.tune.resolve import without_auto

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
            from mlharness.power.session import run_power

            say = (lambda text: None) if args.json else (
                lambda text: console_err.print(f"[bold]power:[/] {escape(text)}", highlight=False))
            record = run_power(spec, power, say)
        else:
            with LiveProgress(enabled=not args.no_progress and not args.json
                              and sys.stderr.isatty()) as bar:
                record = execute(spec, bar)
    finally:
        if meter:
            meter.stop()
    if meter:
        meter.attach(record.run_dir, record.record)
    if args.json:
        print_json({**record.data, "run_dir": str(record.run_dir)})
        return record.exit_code
    show_record(record.data, record.run_dir)
    return record.exit_code


def resolved_spec(spec: RunSpec, explicit: set[str] | None = None, quiet: bool = False,
                  progress: bool = True) -> RunSpec:
    """``spec`` with its target resolved (mlharness.tune.resolve_targets): a line on what is
    measured and one with the result. The probes' own verdicts (a search crosses the edge on
    purpose) are for `mlharness tune`, which tables them; here they stay in _tune/."""
    from mlharness.tune import resolve_targets

    def notify(text: str) -> None:
        if not quiet:
            console.print(escape(text))

    with LiveProgress(enabled=progress and not quiet and sys.stderr.isatty()) as bar:
        return resolve_targets(spec, explicit=explicit, progress=bar, notify=notify)


def refuse_if_not_countable(spec: RunSpec, round_name: str | None, division: str) -> None:
    """Before a long --valid run of a round benchmark: refuse, with reasons, if it cannot count."""
    from mlharness import rules
    from mlharness.tasks import BENCHMARKS

    if spec.benchmark not in BENCHMARKS or spec.benchmark == "demo":
        return  # not an MLPerf benchmark: nothing to count for
    problems = rules.preflight(spec, rules.load(round_name) if round_name else None, division)
    if problems:
        lines = "; ".join(f"{p.message} (fix: {p.fix})" if p.fix else p.message
                          for p in problems)
        raise ConfigError(f"this --valid run cannot count for the round: {lines}",
                          hint="fix the settings above, or pass --no-preflight to run it anyway")


def show_record(data: dict[str, Any], run_dir: Path) -> None:
    """The one-screen verdict of one run."""
    console.print(results_table([data], title=f"{data['benchmark']} — {run_dir}"))
    for line in power_lines(data):
        console.print(line, highlight=False)
    for note in [*(data.get("backend") or {}).get("notes", []),
                 *((data.get("sut") or {}).get("placement") or {}).get("notes", [])]:
        console.print(f"[yellow]note:[/] {escape(str(note))}", highlight=False)
    verdict, _ = verdict_text(data)
    dist = data.get("distributed") or {}
    for note in dist.get("notes", []):  # failovers and restarts: a node's words, not markup
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    if verdict == "INVALID" and (dist.get("failed_over") or dist.get("restarts")):
        console.print("[yellow]note:[/] INVALID with a failover or restart in the run: the "
                      "re-issued samples waited for it, so the target may not be the cause",
                      highlight=False)
    if data.get("status") == "failed":
        err = data.get("error") or {}
        console.print(f"[red]run failed:[/] {escape(str(err.get('message')))}")
        console.print(escape(f"  partial logs kept in {run_dir}"))
    elif not data["spec"].get("valid") and verdict in ("VALID", "PASS"):
        console.print("[yellow]note:[/] --test run: fine for checking, too short for a submission "
                      "(use --valid)")
