"""LLM streaming client overhead: the openai backend (mlharness) vs a bare asyncio client and
MLCommons' endpoints client.

Both sides stream from the same scripted OpenAI-compatible server (tests/llm_server.py, in a
process of its own on a free port: fixed TTFT, a fixed gap between tokens, a fixed number of
tokens) with the same number of streams in flight and the same requests, in alternating rounds
(bare, harness, endpoints, bare, ...), so all see the same machine.

* bare: the least a client can do, in this file: open a connection, POST, read the SSE lines
  (``StreamReader.readline``), count the token ids, note the first one's time; on asyncio's
  own loop (``--bare-uvloop``: on uvloop's, as the backend runs where uvloop is installed).
* harness: ``OpenAIBackend.submit`` called from a driver thread (as LoadGen's), with
  ``concurrency = --streams``; its callbacks (on the backend's loop) note the first token and
  the end.
* endpoints: MLCommons' endpoints client (``inference-endpoint benchmark online
  --load-pattern concurrency --concurrency STREAMS --num-samples REQUESTS --streaming on
  --api-type openai_completions``, flags from ../shared/official/endpoints/docs/
  CLI_QUICK_REFERENCE.md and its ``--help``) run as its CLI runs, in a subprocess, from
  ``.venv-referee-endpoints`` (``make referee-endpoints`` builds it; missing, this side is left
  out and said so). Offline: a one-row dataset of ``input_tokens`` (the prompt's ids, sent as
  ``prompt`` to /v1/completions as the harness sends them: its completions_adapter.py) and a
  local word-level tokenizer (``--tokenizer DIR``), one token per whitespace-separated word,
  because the client counts output tokens by tokenizing the streamed text (OSL:
  metrics_aggregator/metrics_table.py, ``add_special_tokens=False`` in token_metrics.py) and the
  server streams `` t<id>`` a token, so each token is one word. ``--endpoints-workers`` worker
  processes (default 1: its auto is at least 10, endpoint_client/config.py, which on 2 cores
  does not start within its 60 s), ``--no-cpu-affinity`` (a shared machine), no warmup
  connections (``--client.warmup-connections 0``). Its report
  (``performance/result_summary.json``) gives tokens/s (``tps``: output tokens over the tracked
  duration, start of performance tracking to the last completion, metrics/report.py) and TTFT
  p99 (``ttft.percentiles["99.0"]``, ns, from an HDR histogram).

What each side counts, and what differs:
* tokens/s: output tokens over the round's wall time, first submit to last completion, on every
  side; bare and harness count the token ids streamed, endpoints the words of the streamed
  text, the same number here (checked: its output token total must be completed x ``--tokens``).
* TTFT: from the request's send by the load generator to the first token seen by it. Bare: from
  before its connect to the first ``data:`` line parsed, on one loop. Harness: from ``submit`` on
  the driver thread to ``on_first`` on the backend's loop (a thread hop). Endpoints: from its
  ISSUED event (main process, before the query is sent to a worker process over ZMQ) to its
  RECV_FIRST event (main process, when the worker's first-chunk message arrives;
  load_generator/session.py), so two process hops. p99: nearest rank over every request for
  bare and harness, an HDR histogram's for endpoints.
* connections: every side opens one connection a request (the scripted server closes each
  after its answer and says ``Connection: close``); against a keep-alive server endpoints would
  reuse its pooled connections, which this benchmark does not measure.
* endpoints' per-round process start (its services, the tokenizer, the worker: seconds) is
  outside its tracked duration; its client CPU is not shown (it is spread over four processes).

Both are closed loops at saturation: ``--streams`` requests in flight from start to end, the
next one sent as soon as one ends (bare: ``--streams`` workers; harness: the driver submits one
per ``on_done``), so no request waits in the client for a free stream and TTFT, measured from the
moment of submit, is the server's TTFT plus what the client adds (its loop's backlog, the hop to
the loop thread, the connection). ADDED TTFT p99 is the harness's TTFT p99 less the bare
client's; tokens/s and TTFT p99 are each side's median over the rounds.
Prints each round: tokens/s, TTFT p50/p99, the client loop's lag (a 10 ms timer's lateness;
uvloop's clock counts whole milliseconds), this process's CPU (share of a core, user and system
microseconds a token) and the server process's (a server near 100 % of a core is the
bottleneck, not the client); then

    RATIO harness/bare tokens/s = X.XX
    ADDED TTFT p99 ms = X.XX
    RATIO mlharness/endpoints tokens/s = X.XX
    ADDED TTFT p99 ms vs endpoints = X.XX   (mlharness's TTFT p99 less endpoints')

    .venv/bin/python benchmarks/llm_client.py [--streams 1000] [--requests 3000] [--rounds 3]
        [--ttft-ms 50] [--gap-ms 5] [--tokens 32] [--bare-uvloop] [--quick]
        [--endpoints-workers 1] [--no-endpoints]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))

from mlharness.backends import BackendOptions  # noqa: E402
from mlharness.backends.base import GenerationRequest  # noqa: E402
from mlharness.backends.openai import OpenAIBackend  # noqa: E402

PROMPT = [1, 2, 3, 4, 5, 6, 7, 8]
MODEL = "scripted"


@dataclass
class Round:
    side: str
    tokens: int
    wall_s: float
    ttft_s: list[float]
    errors: int
    client_cpu_s: tuple[float, float] | None  # user, system (None: not measured)
    server_cpu_s: float
    lag_s: list[float]  # the client loop's timer lateness, sampled every 10 ms
    reported: tuple[float, float, float] | None = None  # a report's tokens/s, TTFT p50, p99

    @property
    def tokens_per_s(self) -> float:
        return self.reported[0] if self.reported else self.tokens / self.wall_s

    def ttft_p(self, q: int) -> float:
        if self.reported:
            return self.reported[1] if q == 50 else self.reported[2]
        return percentile(self.ttft_s, q)

    def line(self) -> str:
        text = (f"{self.side:10}{self.tokens_per_s:>8,.0f} tok/s  TTFT p50 "
                f"{self.ttft_p(50) * 1e3:6.1f} p99 {self.ttft_p(99) * 1e3:6.1f} ms  ")
        if self.lag_s:
            lag50, lag99 = percentile(self.lag_s, 50), percentile(self.lag_s, 99)
            text += f"loop lag p50 {lag50 * 1e3:5.1f} p99 {lag99 * 1e3:5.1f} ms  "
        if self.client_cpu_s:
            user, system = self.client_cpu_s
            text += (f"client CPU {(user + system) / self.wall_s:4.0%}, us/token user "
                     f"{user / self.tokens * 1e6:4.1f} sys {system / self.tokens * 1e6:4.1f}  ")
        return (text + f"server CPU {self.server_cpu_s / self.wall_s:4.0%}  wall "
                f"{self.wall_s:.2f} s" + (f"   ERRORS {self.errors}" if self.errors else ""))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


# -- the server, in a process of its own -----------------------------------------------------


def serve(ttft_ms: float, gap_ms: float, tokens: int) -> None:
    """Child mode: run the scripted server, print its port, stop when stdin closes."""
    sys.path.insert(0, str(ROOT / "tests"))
    from llm_server import Script, ScriptedServer

    with ScriptedServer(Script(ttft_s=ttft_ms / 1e3, gap_s=gap_ms / 1e3, n_tokens=tokens)) as s:
        s.seen = _Forgetful()  # it would keep every request: memory, not needed here
        print(s.port, flush=True)
        sys.stdin.read()


class _Forgetful(list):
    def append(self, item: object) -> None:
        pass


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def probe_lag(lags: list[float], stop: asyncio.Event, every_s: float = 0.01) -> None:
    """How late the loop runs a timer (its lag: what a token waits behind the loop's backlog)."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        due = loop.time() + every_s
        await asyncio.sleep(every_s)
        lags.append(loop.time() - due)


def client_cpu(since: tuple[float, float] = (0.0, 0.0)) -> tuple[float, float]:
    """User and system CPU seconds of this process (every thread), less ``since``."""
    now = os.times()
    return now.user - since[0], now.system - since[1]


def new_uvloop() -> Callable[[], asyncio.AbstractEventLoop]:
    import uvloop

    return uvloop.new_event_loop


# -- (a) the bare client ---------------------------------------------------------------------


async def bare_one(port: int, body: bytes) -> tuple[float | None, int]:
    """One request: the time of its first token and its token count."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                 "Connection: close\r\n\r\n".encode() + body)
    await writer.drain()
    while (await reader.readline()) not in (b"\r\n", b""):  # status line and headers
        pass
    n, first = 0, None
    while line := await reader.readline():  # chunk sizes, SSE lines, blank lines
        if not line.startswith(b"data: "):
            continue
        data = line[6:].strip()
        if data == b"[DONE]":
            break
        ids = json.loads(data)["choices"][0].get("token_ids") or []
        if ids and first is None:
            first = time.perf_counter()
        n += len(ids)
    writer.close()
    return first, n


def bare_round(port: int, streams: int, requests: int, tokens: int, server_pid: int,
               uvloop: bool = False) -> Round:
    """``streams`` workers, each sending its next request when the last one ends."""
    body = json.dumps({"model": MODEL, "prompt": PROMPT, "max_tokens": tokens, "stream": True,
                       "return_token_ids": True, "temperature": 0.0}).encode()
    ttft: list[float] = []
    counts: list[int] = []
    errors: list[BaseException] = []
    lags: list[float] = []
    left = [requests]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            submitted = time.perf_counter()
            try:
                first, n = await bare_one(port, body)
            except (OSError, ValueError) as exc:
                errors.append(exc)
                continue
            ttft.append((first or time.perf_counter()) - submitted)
            counts.append(n)

    async def main() -> None:
        stop = asyncio.Event()
        probe = asyncio.ensure_future(probe_lag(lags, stop))
        await asyncio.gather(*(worker() for _ in range(streams)))
        stop.set()
        await probe

    cpu0, server0 = client_cpu(), cpu_s(server_pid)
    start = time.perf_counter()
    with asyncio.Runner(loop_factory=new_uvloop() if uvloop else None) as runner:
        runner.run(main())
    return Round("bare", sum(counts), time.perf_counter() - start, ttft, len(errors),
                 client_cpu(cpu0), cpu_s(server_pid) - server0, lags)


# -- (b) the harness: OpenAIBackend.submit from a driver thread ------------------------------


def harness_round(backend: OpenAIBackend, streams: int, requests: int, tokens: int,
                  server_pid: int) -> Round:
    """A driver thread (as LoadGen's) submits ``streams`` requests, then one more each time one
    ends; the backend's callbacks (on its loop thread) note the first token and the end."""
    submitted = [0.0] * requests
    first = [0.0] * requests
    counts: list[int] = []
    errors: list[str] = []
    ended: queue.SimpleQueue[None] = queue.SimpleQueue()
    lags: list[float] = []
    request = GenerationRequest(input_ids=tuple(PROMPT), text=None, max_new_tokens=tokens)

    def submit(i: int) -> None:
        def on_first(ids: list[int]) -> None:
            first[i] = time.perf_counter()

        def on_done(ids: list[int]) -> None:
            counts.append(len(ids))
            ended.put(None)

        def on_error(why: str) -> None:
            errors.append(why)
            ended.put(None)

        submitted[i] = time.perf_counter()
        backend.submit(request, on_first, on_done, on_error)

    loop = backend._loop  # the backend's own loop: its lag is what its tokens wait
    assert loop is not None
    stop = asyncio.Event()
    probe = asyncio.run_coroutine_threadsafe(probe_lag(lags, stop), loop)
    cpu0, server0 = client_cpu(), cpu_s(server_pid)
    start = time.perf_counter()
    for i in range(min(streams, requests)):
        submit(i)
    for i in range(min(streams, requests), requests):
        ended.get()
        submit(i)
    for _ in range(min(streams, requests)):
        ended.get()
    wall = time.perf_counter() - start
    cpu, server = client_cpu(cpu0), cpu_s(server_pid) - server0
    loop.call_soon_threadsafe(stop.set)
    probe.result(10)
    if errors:
        print(f"  harness error (1 of {len(errors)}): {errors[0]}")
    ttft = [f - s for f, s in zip(first, submitted) if f]
    return Round("harness", sum(counts), wall, ttft, len(errors), cpu, server, lags)


# -- (c) MLCommons' endpoints client, as its CLI runs -----------------------------------------


def endpoints_cli() -> Path:
    """Its CLI in the endpoints referee venv (``MLPERF_ENDPOINTS_PYTHON``'s, as tests use)."""
    python = os.environ.get("MLPERF_ENDPOINTS_PYTHON")
    bin_dir = Path(python).parent if python else ROOT / ".venv-referee-endpoints" / "bin"
    return bin_dir / "inference-endpoint"


def endpoints_inputs(folder: Path) -> tuple[Path, Path]:
    """A one-row pre-tokenized dataset and a word-level tokenizer (one token a word) that the
    endpoints client reads offline; their paths."""
    # lazy: only this side needs tokenizers/transformers (the base extras do not install them)
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # a chat template only so that the client's tool-call baseline does not log an error
    PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>", chat_template=(
        "{% for m in messages %}{{ m['content'] }} {% endfor %}")).save_pretrained(
        folder / "tokenizer")
    # ``input_tokens``: the column completions_adapter.py sends as the prompt
    (folder / "prompts.jsonl").write_text(json.dumps({"input_tokens": PROMPT}) + "\n")
    return folder / "prompts.jsonl", folder / "tokenizer"


def endpoints_round(cli: Path, inputs: tuple[Path, Path], folder: Path, port: int,
                    streams: int, requests: int, tokens: int, server_pid: int,
                    workers: int) -> Round:
    """One run of ``inference-endpoint benchmark online`` at ``streams`` concurrency; its
    report's tokens/s and TTFT."""
    dataset, tokenizer = inputs
    report = folder / f"report-{time.monotonic_ns()}"
    home = folder / "home"
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_HOME=str(home / "hf"), XDG_CACHE_HOME=str(home / "cache"), TQDM_DISABLE="1",
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)  # nothing of mlharness on its path
    command = [str(cli), "benchmark", "online", "--endpoints", f"http://127.0.0.1:{port}",
               "--model", MODEL, "--tokenizer", str(tokenizer), "--dataset", str(dataset),
               "--api-type", "openai_completions", "--streaming", "on",
               "--max-output-tokens", str(tokens), "--load-pattern", "concurrency",
               "--concurrency", str(streams), "--num-samples", str(requests), "--duration", "0",
               "--workers", str(workers), "--client.warmup-connections", "0",
               "--no-cpu-affinity", "--report-dir", str(report)]
    server0 = cpu_s(server_pid)
    proc = subprocess.run(command, env=env, cwd=folder, capture_output=True, text=True,
                          timeout=900)
    server = cpu_s(server_pid) - server0
    summary_path = report / "performance" / "result_summary.json"
    if proc.returncode != 0 or not summary_path.is_file():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise RuntimeError(f"inference-endpoint exited {proc.returncode}:\n" + "\n".join(tail))
    summary = json.loads(summary_path.read_text())
    wall = summary["duration_ns"] / 1e9
    total = int(summary["output_sequence_lengths"]["total"])
    completed = summary["n_samples_completed"] - summary["n_samples_failed"]
    if total != completed * tokens:
        print(f"  endpoints counted {total} output tokens for {completed} answers of {tokens}: "
              "its tokens are not the same unit here")
    ttft = summary["ttft"]["percentiles"]
    return Round("endpoints", total, wall, [], summary["n_samples_failed"], None,
                 server, [], (summary["tps"], ttft["50.0"] / 1e9, ttft["99.0"] / 1e9))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000, help="requests in flight at once")
    parser.add_argument("--requests", type=int, default=3000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each side, alternating")
    parser.add_argument("--ttft-ms", type=float, default=50.0, help="the server's TTFT")
    parser.add_argument("--gap-ms", type=float, default=5.0, help="the server's token gap")
    parser.add_argument("--tokens", type=int, default=32, help="tokens per answer")
    parser.add_argument("--bare-uvloop", action="store_true",
                        help="run the bare client on uvloop's loop (as the backend's)")
    parser.add_argument("--endpoints-workers", type=int, default=1,
                        help="the endpoints client's worker processes (its auto is >= 10)")
    parser.add_argument("--no-endpoints", action="store_true",
                        help="leave MLCommons' endpoints client out")
    parser.add_argument("--quick", action="store_true",
                        help="200 streams, 400 requests, 1 round (a smoke test)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.ttft_ms, args.gap_ms, args.tokens)
        return
    if args.quick:
        args.streams, args.requests, args.rounds = 200, 400, 1
    sides = ["bare", "harness"]
    cli = endpoints_cli()
    if args.no_endpoints:
        pass
    elif cli.is_file():
        sides.append("endpoints")
    else:
        print(f"MLCommons' endpoints client left out: no {cli}; `make referee-endpoints` builds "
              ".venv-referee-endpoints (Python 3.12: PYTHON312=PATH), or set "
              "MLPERF_ENDPOINTS_PYTHON", flush=True)
    scratch = tempfile.TemporaryDirectory(prefix="llm-client-")
    folder = Path(scratch.name)
    inputs = endpoints_inputs(folder) if "endpoints" in sides else None

    server = subprocess.Popen([sys.executable, __file__, "--serve", "--ttft-ms",
                               str(args.ttft_ms), "--gap-ms", str(args.gap_ms), "--tokens",
                               str(args.tokens)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        nominal = args.ttft_ms + (args.tokens - 1) * args.gap_ms
        print(f"LLM client overhead: {os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.2f}; scripted server (pid {server.pid}): TTFT "
              f"{args.ttft_ms:g} ms, gap {args.gap_ms:g} ms, {args.tokens} tokens ({nominal:g} ms "
              f"a request, {args.streams * args.tokens / nominal * 1e3:,.0f} tok/s if nothing "
              f"else limited it); {args.streams} streams, {args.requests} requests a round",
              flush=True)
        backend = OpenAIBackend()
        backend.load(None, BackendOptions(extra={
            "endpoints": [f"http://127.0.0.1:{port}"], "served_model": MODEL,
            "concurrency": args.streams}))
        rounds: list[Round] = []
        try:
            for _ in range(args.rounds):
                for side in sides:
                    if side == "bare":
                        r = bare_round(port, args.streams, args.requests, args.tokens,
                                       server.pid, args.bare_uvloop)
                    elif side == "harness":
                        r = harness_round(backend, args.streams, args.requests, args.tokens,
                                          server.pid)
                    else:
                        assert inputs is not None
                        r = endpoints_round(cli, inputs, folder, port, args.streams,
                                            args.requests, args.tokens, server.pid,
                                            args.endpoints_workers)
                    rounds.append(r)
                    print(r.line(), flush=True)
        finally:
            backend.close()
    finally:
        if server.stdin:
            server.stdin.close()
        server.wait(10)
        scratch.cleanup()

    def of_side(name: str) -> list[Round]:
        return [r for r in rounds if r.side == name]

    tps = {name: statistics.median(r.tokens_per_s for r in of_side(name)) for name in sides}
    p99 = {name: statistics.median(r.ttft_p(99) for r in of_side(name)) for name in sides}
    print(f"median of {args.rounds} rounds: tokens/s "
          + ", ".join(f"{name} {tps[name]:,.0f}" for name in sides) + "; TTFT p99 "
          + ", ".join(f"{name} {p99[name] * 1e3:.1f} ms" for name in sides))
    print(f"load average at the end {os.getloadavg()[0]:.2f}; bare client on "
          f"{'uvloop' if args.bare_uvloop else 'asyncio'}'s loop, the backend on "
          f"{type(backend._loop).__module__.split('.')[0]}'s")
    print(f"RATIO harness/bare tokens/s = {tps['harness'] / tps['bare']:.2f}")
    print(f"ADDED TTFT p99 ms = {(p99['harness'] - p99['bare']) * 1e3:.2f}")
    if "endpoints" in sides:
        print(f"RATIO mlharness/endpoints tokens/s = {tps['harness'] / tps['endpoints']:.2f}")
        print(f"ADDED TTFT p99 ms vs endpoints = "
              f"{(p99['harness'] - p99['endpoints']) * 1e3:.2f}")


if __name__ == "__main__":
    main()
