"""LLM streaming client overhead: the openai backend (mlharness) vs a bare asyncio client and
MLCommons' endpoints client.

All sides stream from the same scripted OpenAI-compatible server (tests/llm_server.py, in a
process of its own on a free port: fixed TTFT, a fixed gap between tokens, a fixed number of
tokens; keep-alive, as vLLM serves, unless ``--no-keep-alive``) with the same load and the same
requests, in alternating rounds (bare, harness, endpoints, bare, ...), so all see the same
machine. The server notes when each request arrived and when it sent each token, and after each
round reports its own TTFT and TPOT p99: what the server really did. A client's ADDED TTFT/TPOT
p99 is its p99 less the server's in that round. The bare client and the comparisons are here;
the server, the harness's side and a round's numbers in llm_rounds.py (prewarm.py uses them
too), endpoints' side in llm_endpoints.py.

* bare: the least a client can do, in this file: one keep-alive connection a stream (a new one a
  request with ``--no-keep-alive``), POST, read the SSE lines (``StreamReader.readline``), count
  the token ids, note the first and last one's time; on asyncio's own loop (``--bare-uvloop``: on
  uvloop's, as the backend runs where uvloop is installed).
* harness: ``OpenAIBackend.submit`` called from a driver thread (as LoadGen's); its callbacks
  (on the backend's loop) note the first token and the end. Its pool is pre-warmed through
  ``issue_pattern`` as a run does, after one timed warm-up request (closed loop and offline:
  ``concurrency`` = the streams; paced: ``auto``, which sends paced queries as they come, its
  pool sized from the target QPS and the warm-up's time; endpoints gets as many).
* endpoints: MLCommons' endpoints client (``inference-endpoint benchmark online
  --load-pattern concurrency --concurrency STREAMS`` / ``--load-pattern poisson --target-qps Q``,
  ``benchmark offline``; ``--streaming on --api-type openai_completions``, flags from
  ../shared/official/endpoints/docs/CLI_QUICK_REFERENCE.md and its ``--help``) run as its CLI
  runs, in a subprocess, from ``.venv-referee-endpoints`` (``make referee-endpoints`` builds it;
  missing, this side is left out and said so). A one-row dataset of ``input_tokens`` (the
  prompt's ids, sent as ``prompt`` to /v1/completions as the harness sends them: its
  completions_adapter.py) and a local word-level tokenizer (``--tokenizer DIR``), one token per
  whitespace-separated word, because the client counts output tokens by tokenizing the streamed
  text (OSL: metrics_aggregator/metrics_table.py, ``add_special_tokens=False`` in
  token_metrics.py) and the server streams `` t<id>`` a token, so each token is one word.
  ``--endpoints-workers`` worker processes (default 1: its auto is at least 10,
  endpoint_client/config.py, which on 2 cores does not start within its 60 s),
  ``--no-cpu-affinity`` (a shared machine), its connections pre-warmed as many as the load
  expects in flight (``--client.warmup-connections``; its auto would open a quarter of the port
  range). Its report (``performance/result_summary.json``) gives tokens/s (``tps``: output tokens
  over the tracked duration, metrics/report.py) and TTFT and TPOT p99 (``ttft``/``tpot``
  ``percentiles["99.0"]``, ns, from an HDR histogram).

What each side counts, and what differs:
* tokens/s: output tokens over the round's wall time, first submit to last completion, on every
  side; bare and harness count the token ids streamed, endpoints the words of the streamed
  text, the same number here (checked: its output token total must be completed x ``--tokens``).
* TTFT: from the request's send by the load generator (paced: its scheduled time, as LoadGen
  counts) to the first token seen by it. Bare: from before its send to the first ``data:`` line
  parsed, on one loop. Harness: from ``submit`` on the driver thread to ``on_first`` on the
  backend's loop (a thread hop). Endpoints: from its ISSUED event to its RECV_FIRST event (main
  process; two process hops). TPOT: (last token - first token) / (tokens - 1) a request, as
  LoadGen counts. p99: nearest rank over every request for bare and harness, an HDR histogram's
  for endpoints.
* endpoints' per-round process start (its services, the tokenizer, the workers, its pool's
  warm-up: seconds) is outside its tracked duration; its client CPU is not shown (it is spread
  over four processes). The harness's pool is warmed once, before its first round.

The default run is a closed loop at saturation: ``--streams`` requests in flight from start to
end, the next one sent as soon as one ends, so no request waits in the client for a free stream.
Each comparison is repeated ``--rounds`` times and printed as median [min-max] over the rounds
(a ratio or a difference of the same round's sides):

    RATIO harness/bare tokens/s = X.XX [X.XX-X.XX]
    ADDED TTFT p99 ms = X.XX [..]                    (harness's TTFT p99 less bare's)
    RATIO mlharness/endpoints tokens/s = X.XX [..]
    ADDED TTFT p99 ms vs endpoints = X.XX [..]       (what mlharness added less what endpoints
    ADDED TPOT p99 ms vs endpoints = X.XX [..]        added, each over the server's own p99)

(Against endpoints, each side's p99 is taken less the server's own p99 of the same round: the
server, on the same shared cores, is not equally late in every round.)

``--sweep`` then runs mlharness and endpoints, alternating, at 100, 300 and 800 QPS (Poisson
arrivals for ``--sweep-s`` seconds, LoadGen's Server pattern) and offline at 3,000 and 8,000
streams (every request at once), and prints per point tokens/s and each side's added TTFT and
TPOT p99 over the server's (``SWEEP ...`` lines); paced points say how late the harness's
arrivals reached the server.

    .venv/bin/python benchmarks/llm_client.py [--streams 1000] [--requests 2000] [--rounds 3]
        [--ttft-ms 50] [--gap-ms 5] [--tokens 32] [--bare-uvloop] [--quick] [--sweep]
        [--sweep-s 10] [--sweep-only] [--sweep-points 800q 3000s] [--endpoints-workers 1] [--no-endpoints] [--no-keep-alive]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llm_endpoints import endpoints_cli, endpoints_inputs, endpoints_round  # noqa: E402
from llm_rounds import (MODEL, PROMPT, Round, Server, add_server_flags,  # noqa: E402
                        client_cpu, cpu_s, harness_backend, harness_round, new_uvloop,
                        poisson, pooled, probe_lag, request_s, spread, tpot)

from mlharness.backends.base import IssuePattern  # noqa: E402
from mlharness.collector import held_collector  # noqa: E402

#: the sweep's points: Poisson arrivals at a QPS, or every request at once over N streams
SWEEP_POINTS = [("QPS", 100.0), ("QPS", 300.0), ("QPS", 800.0), ("streams", 3000.0),
                ("streams", 8000.0)]


# -- the bare client (the harness's and endpoints' sides: llm_rounds.py, llm_endpoints.py) -


class BareStream:
    """One stream's connection (kept between its requests when the server keeps it)."""

    def __init__(self, port: int, keep: bool) -> None:
        self.port, self.keep = port, keep
        self.conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def one(self, body: bytes) -> tuple[float | None, float | None, int]:
        """One request: the time of its first and last token and its token count."""
        if self.conn is None:
            self.conn = await asyncio.open_connection("127.0.0.1", self.port)
        reader, writer = self.conn
        writer.write((f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                     + ("" if self.keep else "Connection: close\r\n")
                     + "\r\n").encode() + body)
        await writer.drain()
        while (await reader.readline()) not in (b"\r\n", b""):  # status line and headers
            pass
        n, first, last = 0, None, None
        while line := await reader.readline():  # chunk sizes, SSE lines, blank lines
            if not line.startswith(b"data: "):
                continue
            data = line[6:].strip()
            if data == b"[DONE]":
                break
            ids = json.loads(data)["choices"][0].get("token_ids") or []
            if ids:
                last = time.perf_counter()
                first = first or last
            n += len(ids)
        if self.keep:  # the rest of the chunked body: the terminator and its blank line
            while (await reader.readline()) not in (b"0\r\n", b""):
                pass
            await reader.readline()
        else:
            writer.close()
            self.conn = None
        return first, last, n


def bare_round(server: Server, streams: int, requests: int, tokens: int, uvloop: bool,
               keep: bool) -> Round:
    """``streams`` workers, each sending its next request when the last one ends."""
    body = json.dumps({"model": MODEL, "prompt": PROMPT, "max_tokens": tokens, "stream": True,
                       "return_token_ids": True, "temperature": 0.0}).encode()
    ttft: list[float] = []
    tpots: list[float] = []
    counts: list[int] = []
    errors: list[BaseException] = []
    lags: list[float] = []
    left = [requests]

    async def worker(stream: BareStream) -> None:
        while left[0] > 0:
            left[0] -= 1
            submitted = time.perf_counter()
            try:
                first, last, n = await stream.one(body)
            except (OSError, ValueError) as exc:
                errors.append(exc)
                stream.conn = None
                continue
            ttft.append((first or time.perf_counter()) - submitted)
            if first and last and (t := tpot(first, last, n)) is not None:
                tpots.append(t)
            counts.append(n)
        if stream.conn is not None:
            stream.conn[1].close()

    async def main() -> float:
        pool = [BareStream(server.port, keep) for _ in range(streams)]
        if keep:  # its connections opened before the round, as the harness's pool
            conns = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", server.port)
                                           for _ in pool))
            for stream, conn in zip(pool, conns):
                stream.conn = conn
        stop = asyncio.Event()
        begun[:] = [client_cpu(), cpu_s(server.pid), time.perf_counter()]
        probe = asyncio.ensure_future(probe_lag(lags, stop))
        await asyncio.gather(*(worker(stream) for stream in pool))
        wall = time.perf_counter() - begun[2]
        stop.set()
        await probe
        return wall

    begun: list = []
    with asyncio.Runner(loop_factory=new_uvloop() if uvloop else None) as runner:
        wall = runner.run(main())
    return Round("bare", sum(counts), wall, ttft, len(errors), client_cpu(begun[0]),
                 cpu_s(server.pid) - begun[1], lags, tpot_s=tpots, server=server.stats())


# -- the comparisons -------------------------------------------------------------------------


def compare(args: argparse.Namespace, server: Server, sides: list[str],
            endpoints: tuple[Path, tuple[Path, Path], Path] | None) -> list[Round]:
    """The default comparison: every side at ``--streams`` in a closed loop, alternating."""
    backend = harness_backend(server.port, args.streams, IssuePattern(all_at_once=True),
                              args.tokens)
    rounds: list[Round] = []
    concurrency = ["online", "--load-pattern", "concurrency", "--concurrency", str(args.streams)]
    startup = None
    if endpoints is not None:  # its CPU to start and end, the same pool warmed: one request
        cli, inputs, folder = endpoints
        startup = endpoints_round(cli, inputs, folder, server, concurrency, 1, args.tokens,
                                  args.endpoints_workers, args.streams, (0.0, 0.0)).client_cpu_s
        assert startup is not None
        print(f"endpoints' start and end (one request): {sum(startup):.1f} CPU-s, subtracted "
              "from its rounds' client CPU", flush=True)
    try:
        for _ in range(args.rounds):
            for side in sides:
                if side == "bare":
                    with held_collector():  # as a run's test (loadgen/session.py)
                        r = bare_round(server, args.streams, args.requests, args.tokens,
                                       args.bare_uvloop, not args.no_keep_alive)
                elif side == "harness":
                    with held_collector():
                        r = harness_round(backend, server, args.streams, args.requests,
                                          args.tokens)
                else:
                    assert endpoints is not None
                    cli, inputs, folder = endpoints
                    r = endpoints_round(cli, inputs, folder, server, concurrency,
                                        args.requests, args.tokens, args.endpoints_workers,
                                        args.streams, startup)
                rounds.append(r)
                print(r.line(), flush=True)
    finally:
        print(f"  harness connections: {backend.report()['connections']}", flush=True)
        backend.close()
    return rounds


def summary(rounds: list[Round], sides: list[str]) -> None:
    """The lines of the default comparison: each a median [min-max] over the rounds."""
    def paired(a: str, b: str, value: Callable[[Round, Round], float]) -> list[float]:
        first = [r for r in rounds if r.side == a]
        second = [r for r in rounds if r.side == b]
        return [value(x, y) for x, y in zip(first, second)]

    for side in sides:
        mine = [r for r in rounds if r.side == side]
        print(f"{side}: tokens/s {spread([r.tokens_per_s for r in mine], 0)}, TTFT p99 ms "
              f"{spread([r.ttft_p(99) * 1e3 for r in mine], 1)} (added over the server's "
              f"{spread([r.added_ttft() * 1e3 for r in mine], 1)}), TPOT p99 ms "
              f"{spread([r.tpot_p99() * 1e3 for r in mine])} (added "
              f"{spread([r.added_tpot() * 1e3 for r in mine])})")
    print("RATIO harness/bare tokens/s = "
          + spread(paired("harness", "bare", lambda h, b: h.tokens_per_s / b.tokens_per_s)))
    print("ADDED TTFT p99 ms = "
          + spread(paired("harness", "bare", lambda h, b: (h.ttft_p(99) - b.ttft_p(99)) * 1e3)))
    if "endpoints" in sides:
        print("RATIO mlharness/endpoints tokens/s = " + spread(paired(
            "harness", "endpoints", lambda h, e: h.tokens_per_s / e.tokens_per_s)))
        # each side's p99 less the server's own in its round: what each client added
        print("ADDED TTFT p99 ms vs endpoints = " + spread(paired(
            "harness", "endpoints", lambda h, e: (h.added_ttft() - e.added_ttft()) * 1e3)))
        print("ADDED TPOT p99 ms vs endpoints = " + spread(paired(
            "harness", "endpoints", lambda h, e: (h.added_tpot() - e.added_tpot()) * 1e3)))
        # the client's CPU a token (endpoints': less its start and end): a server-bound
        # round's tokens/s is the server's, its CPU a token is the client's own cost
        print("RATIO endpoints/mlharness client CPU per token = " + spread(paired(
            "endpoints", "harness", lambda e, h: e.cpu_per_token() / h.cpu_per_token())))


def sweep(args: argparse.Namespace, server: Server,
          endpoints: tuple[Path, tuple[Path, Path], Path]) -> None:
    """mlharness and endpoints, alternating, at 100/300/800 QPS (Poisson) and offline at
    3,000 and 8,000 streams; a ``SWEEP`` line a point."""
    cli, inputs, folder = endpoints
    nominal_s = request_s(args)
    points = [point for point in SWEEP_POINTS if not args.sweep_points
              or f"{point[1]:g}{point[0][0].lower()}" in args.sweep_points]
    for kind, value in points:
        if kind == "QPS":
            schedule = poisson(value, args.sweep_s)
            backend = harness_backend(server.port, "auto", IssuePattern.of("Server", value),
                                      args.tokens)
            load = ["online", "--load-pattern", "poisson", "--target-qps", f"{value:g}"]
            requests = len(schedule)
        else:
            schedule = None
            backend = harness_backend(server.port, int(value), IssuePattern(all_at_once=True),
                                      args.tokens)
            load, requests = ["offline"], int(value)
        expected = pooled(backend)
        nominal = f" (Little's law: {value * nominal_s:,.0f} in flight)" if schedule else ""
        print(f"-- {value:,.0f} {kind}: {requests} requests, {expected} connections "
              f"pre-warmed a side{nominal}", flush=True)
        rounds: list[Round] = []
        try:
            for _ in range(args.rounds):
                with held_collector():  # as a run's test (loadgen/session.py)
                    rounds.append(harness_round(backend, server, requests, requests,
                                                args.tokens, schedule))
                print(rounds[-1].line(), flush=True)
                try:
                    rounds.append(endpoints_round(cli, inputs, folder, server, load, requests,
                                                  args.tokens, args.endpoints_workers,
                                                  expected))
                except RuntimeError as exc:  # e.g. its workers not up within its 60 s
                    print(f"endpoints   FAILED: {str(exc).splitlines()[-1][:200]}", flush=True)
                    server.stats()
                    continue
                print(rounds[-1].line(), flush=True)
        finally:
            bound = backend.report().get("bound")
            backend.close()
        ours = [r for r in rounds if r.side == "harness"]
        theirs = [r for r in rounds if r.side == "endpoints"]
        late = ""
        if kind == "QPS" and schedule:
            late = (f"; arrivals over {spread([r.arrival_s or 0 for r in ours])} s "
                    f"(scheduled {schedule[-1] - schedule[0]:.2f}; endpoints "
                    f"{spread([r.arrival_s or 0 for r in theirs])})")
        print(f"SWEEP {value:,.0f} {kind}: tokens/s mlharness/endpoints "
              f"{spread([h.tokens_per_s / e.tokens_per_s for h, e in zip(ours, theirs)])}; "
              f"added TTFT p99 ms mlharness {spread([r.added_ttft() * 1e3 for r in ours], 1)}"
              f" endpoints {spread([r.added_ttft() * 1e3 for r in theirs], 1)}; added TPOT p99 "
              f"ms mlharness {spread([r.added_tpot() * 1e3 for r in ours])} endpoints "
              f"{spread([r.added_tpot() * 1e3 for r in theirs])}{late}"
              + (f"; BOUND: {bound}" if bound else ""), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000, help="requests in flight at once")
    parser.add_argument("--requests", type=int, default=2000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of each side, alternating; median [min-max] printed")
    add_server_flags(parser, ttft_ms=50.0, gap_ms=5.0, tokens=32)
    parser.add_argument("--bare-uvloop", action="store_true",
                        help="run the bare client on uvloop's loop (as the backend's)")
    parser.add_argument("--endpoints-workers", type=int, default=1,
                        help="the endpoints client's worker processes (its auto is >= 10)")
    parser.add_argument("--no-endpoints", action="store_true",
                        help="leave MLCommons' endpoints client out")
    parser.add_argument("--sweep", action="store_true",
                        help="then mlharness vs endpoints at 100/300/800 QPS and offline at "
                             "3,000/8,000 streams (minutes)")
    parser.add_argument("--sweep-only", action="store_true",
                        help="the sweep alone, without the closed-loop comparison first")
    parser.add_argument("--sweep-points", nargs="+", metavar="POINT",
                        help="only these sweep points, e.g. 800q 3000s (default: all of "
                             "100q 300q 800q 3000s 8000s)")
    parser.add_argument("--sweep-s", type=float, default=10.0,
                        help="seconds of Poisson arrivals a paced sweep point")
    parser.add_argument("--quick", action="store_true",
                        help="200 streams, 400 requests, 1 round (a smoke test)")
    args = parser.parse_args()
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
    endpoints = ((cli, endpoints_inputs(folder), folder) if "endpoints" in sides else None)
    server = Server(args)
    try:
        nominal = request_s(args) * 1e3
        print(f"LLM client overhead: {os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.2f}; scripted server (pid {server.pid}, "
              f"{'Connection: close' if args.no_keep_alive else 'keep-alive'}): TTFT "
              f"{args.ttft_ms:g} ms, gap {args.gap_ms:g} ms, {args.tokens} tokens ({nominal:g} ms "
              f"a request, {args.streams * args.tokens / nominal * 1e3:,.0f} tok/s if nothing "
              f"else limited it); {args.streams} streams, {args.requests} requests a round",
              flush=True)
        if not args.sweep_only:
            rounds = compare(args, server, sides, endpoints)
            print(f"load average at the end {os.getloadavg()[0]:.2f}; bare client on "
                  f"{'uvloop' if args.bare_uvloop else 'asyncio'}'s loop; median "
                  f"[min\u2013max] of {args.rounds} rounds")
            summary(rounds, sides)
        if args.sweep or args.sweep_only or args.sweep_points:
            if endpoints is None:
                print("--sweep compares with MLCommons' endpoints client, which is left out")
            else:
                sweep(args, server, endpoints)
                print(f"load average at the end {os.getloadavg()[0]:.2f}")
    finally:
        server.close()
        scratch.cleanup()


if __name__ == "__main__":
    main()
