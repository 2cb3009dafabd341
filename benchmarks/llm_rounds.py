"""What the LLM client benchmarks share (``llm_client.py``, ``prewarm.py``): a round's numbers
(:class:`Round`, median [min-max] as ``spread``), the scripted streaming server in a process of its
own (:class:`Server`: ``tests/llm_server.py`` with a TTFT, a token gap, a token count and a new
connection's set-up), CPU and loop-lag probes, Poisson arrivals, and the harness's side: the
``openai`` backend set up as a run sets it up (``harness_backend``) and driven from a thread as
LoadGen drives it (``harness_round``).

Run as a script it is the server's child mode (``Server`` starts it): it prints its port, and
each ``stats`` line on stdin prints (and forgets) what the server really did since.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import random
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))

from mlharness.backends import BackendOptions  # noqa: E402
from mlharness.backends.base import GenerationRequest, IssuePattern  # noqa: E402
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
    #: a report's tokens/s, TTFT p50, p99, TPOT p99 (endpoints')
    reported: tuple[float, float, float, float] | None = None
    tpot_s: list[float] = field(default_factory=list)
    server: dict[str, float] = field(default_factory=dict)  # the server's own p99s, this round
    #: paced or all at once: first to last arrival at the server (all at once: how long the
    #: client took to send them all)
    arrival_s: float | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.reported[0] if self.reported else self.tokens / self.wall_s

    def ttft_p(self, q: int) -> float:
        if self.reported:
            return self.reported[1] if q == 50 else self.reported[2]
        return percentile(self.ttft_s, q)

    def tpot_p99(self) -> float:
        if self.reported:
            return self.reported[3]
        return percentile(self.tpot_s, 99) if self.tpot_s else float("nan")

    def cpu_per_token(self) -> float:
        """The client's CPU seconds a token (NaN: not measured)."""
        return sum(self.client_cpu_s) / self.tokens if self.client_cpu_s else float("nan")

    def added_ttft(self) -> float:
        """TTFT p99 less the server's own TTFT p99 (what the client added), seconds."""
        return self.ttft_p(99) - self.server.get("ttft_p99", float("nan"))

    def added_tpot(self) -> float:
        return self.tpot_p99() - self.server.get("tpot_p99", float("nan"))

    def line(self) -> str:
        text = (f"{self.side:10}{self.tokens_per_s:>8,.0f} tok/s  TTFT p50 "
                f"{self.ttft_p(50) * 1e3:6.1f} p99 {self.ttft_p(99) * 1e3:6.1f} ms (added "
                f"{self.added_ttft() * 1e3:+.1f})  TPOT p99 {self.tpot_p99() * 1e3:5.2f} ms "
                f"(added {self.added_tpot() * 1e3:+.2f})  ")
        if self.lag_s:
            lag50, lag99 = percentile(self.lag_s, 50), percentile(self.lag_s, 99)
            text += f"loop lag p50 {lag50 * 1e3:5.1f} p99 {lag99 * 1e3:5.1f} ms  "
        if self.client_cpu_s:
            user, system = self.client_cpu_s
            text += (f"client CPU {(user + system) / self.wall_s:4.0%}, us/token user "
                     f"{user / self.tokens * 1e6:4.1f} sys {system / self.tokens * 1e6:4.1f}  ")
        if self.arrival_s is not None:
            text += f"arrivals over {self.arrival_s:.2f} s  "
        return (text + f"server CPU {self.server_cpu_s / self.wall_s:4.0%}  wall "
                f"{self.wall_s:.2f} s" + (f"   ERRORS {self.errors}" if self.errors else ""))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def spread(values: list[float], digits: int = 2) -> str:
    """``median [min-max]`` of a comparison over the rounds."""
    values = [v for v in values if v == v]  # no NaN
    if not values:
        return "n/a"
    return (f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}"
            f"\u2013{max(values):.{digits}f}]")


def serve(ttft_ms: float, gap_ms: float, tokens: int, keep_alive: bool,
          handshake_ms: float = 0.0) -> None:
    """Child mode: run the scripted server and print its port; each ``stats`` line on stdin
    prints (and forgets) the TTFT and TPOT p99 it really served since; stop when stdin closes."""
    sys.path.insert(0, str(ROOT / "tests"))
    from llm_server import Script, ScriptedServer

    script = Script(ttft_s=ttft_ms / 1e3, gap_s=gap_ms / 1e3, n_tokens=tokens,
                    keep_alive=keep_alive, handshake_s=handshake_ms / 1e3)
    with ScriptedServer(script) as s:
        print(s.port, flush=True)
        for command in sys.stdin:
            if command.strip() != "stats":
                continue
            seen, s.seen = s.seen, []
            done = [x for x in seen if len(x.token_times) > 1]
            arrivals = [x.received for x in seen]
            print(json.dumps({
                "ttft_p99": percentile([x.ttft_s() for x in done], 99) if done else None,
                "tpot_p99": percentile([x.tpot_s() for x in done], 99) if done else None,
                "arrival_s": max(arrivals) - min(arrivals) if arrivals else None,
                "n": len(seen)}), flush=True)


def add_server_flags(parser: argparse.ArgumentParser, ttft_ms: float, gap_ms: float,
                     tokens: int, handshake_ms: float = 0.0) -> None:
    """The scripted server's flags, with a benchmark's defaults (:class:`Server` reads them)."""
    parser.add_argument("--ttft-ms", type=float, default=ttft_ms, help="the server's TTFT")
    parser.add_argument("--gap-ms", type=float, default=gap_ms, help="the server's token gap")
    parser.add_argument("--tokens", type=int, default=tokens, help="tokens per answer")
    parser.add_argument("--handshake-ms", type=float, default=handshake_ms,
                        help="a new connection's set-up at the server (a network's round trips, "
                             "TLS): its first request is read no sooner (default %(default)g)")
    parser.add_argument("--no-keep-alive", action="store_true",
                        help="the server closes each connection after its answer "
                             "(Connection: close): a new connection a request")


def request_s(args: argparse.Namespace) -> float:
    """One request's seconds as the server's flags script it: the TTFT, then a gap a token."""
    return (args.ttft_ms + (args.tokens - 1) * args.gap_ms) / 1e3


class Server:
    """The scripted server's child process: its port, pid and per-round stats."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--ttft-ms", str(args.ttft_ms), "--gap-ms",
             str(args.gap_ms), "--tokens", str(args.tokens), "--handshake-ms",
             str(args.handshake_ms)] + (["--no-keep-alive"] if args.no_keep_alive else []),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())
        self.pid = self.proc.pid

    def stats(self) -> dict[str, float]:
        """What the server really did since the last call (its own p99s)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("stats\n")
        self.proc.stdin.flush()
        return {k: v for k, v in json.loads(self.proc.stdout.readline()).items()
                if v is not None}

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(30)


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


def tpot(first: float, last: float, n: int) -> float | None:
    return (last - first) / (n - 1) if n > 1 else None


def harness_backend(port: int, concurrency: int | str, pattern: IssuePattern,
                    tokens: int) -> OpenAIBackend:
    """The backend as a run sets it up: loaded, one warm-up request of the rounds' length sent
    and timed (a run's --warmup), then told the load's pattern with that time (its pool
    pre-warmed: ``concurrency`` connections, or under paced queries as many as the target QPS
    keeps in flight, openai_admit.paced_connections)."""
    backend = OpenAIBackend()
    options: dict[str, object] = {"endpoints": [f"http://127.0.0.1:{port}"],
                                  "served_model": MODEL, "concurrency": concurrency}
    backend.load(None, BackendOptions(extra=options))
    done = threading.Event()
    t0 = time.perf_counter()
    backend.submit(GenerationRequest(input_ids=tuple(PROMPT), text=None, max_new_tokens=tokens),
                   lambda ids: None, lambda ids: done.set(), lambda why: done.set())
    done.wait(60)
    backend.issue_pattern(replace(pattern, request_s=time.perf_counter() - t0))
    return backend


def pooled(backend: OpenAIBackend, count: str = "prewarmed") -> int:
    """A count of the backend's pools over its endpoints (``stream_report.connections``): the
    connections it pre-warmed (the endpoints side is given as many), or ``opened``."""
    return int(sum(pool[count] for pool in backend.report()["connections"].values()))


def harness_round(backend: OpenAIBackend, server: Server, streams: int, requests: int,
                  tokens: int, schedule: list[float] | None = None) -> Round:
    """A driver thread (as LoadGen's) submits: ``streams`` requests, then one more each time
    one ends (closed loop); or, given ``schedule`` (seconds from the start), each request at its
    time, TTFT counted from it (paced, as LoadGen's Server). The backend's callbacks (on its
    loop thread) note the first token and the end."""
    if schedule is not None:
        requests = len(schedule)
    submitted = [0.0] * requests
    first = [0.0] * requests
    tpots: list[float] = []
    counts: list[int] = []
    errors: list[str] = []
    ended: queue.SimpleQueue[None] = queue.SimpleQueue()
    lags: list[float] = []
    request = GenerationRequest(input_ids=tuple(PROMPT), text=None, max_new_tokens=tokens)

    def submit(i: int, at: float | None = None) -> None:
        def on_first(ids: list[int]) -> None:
            first[i] = time.perf_counter()

        def on_done(ids: list[int]) -> None:
            if (t := tpot(first[i], time.perf_counter(), len(ids))) is not None:
                tpots.append(t)
            counts.append(len(ids))
            ended.put(None)

        def on_error(why: str) -> None:
            errors.append(why)
            ended.put(None)

        submitted[i] = at if at is not None else time.perf_counter()
        backend.submit(request, on_first, on_done, on_error)

    loop = backend._loop  # the backend's own loop: its lag is what its tokens wait
    assert loop is not None
    stop = asyncio.Event()
    probe = asyncio.run_coroutine_threadsafe(probe_lag(lags, stop), loop)
    cpu0, server0 = client_cpu(), cpu_s(server.pid)
    start = time.perf_counter()
    if schedule is not None:
        for i, offset in enumerate(schedule):
            due = start + offset
            if (wait := due - time.perf_counter()) > 0:
                time.sleep(wait)
            submit(i, due)
        for _ in range(requests):
            ended.get()
    else:
        for i in range(min(streams, requests)):
            submit(i)
        for i in range(min(streams, requests), requests):
            ended.get()
            submit(i)
        for _ in range(min(streams, requests)):
            ended.get()
    wall = time.perf_counter() - start
    cpu, spent = client_cpu(cpu0), cpu_s(server.pid) - server0
    loop.call_soon_threadsafe(stop.set)
    probe.result(10)
    if errors:
        print(f"  harness error (1 of {len(errors)}): {errors[0]}")
    ttft = [f - s for f, s in zip(first, submitted) if f]
    stats = server.stats()
    return Round("harness", sum(counts), wall, ttft, len(errors), cpu, spent, lags,
                 tpot_s=tpots, server=stats,
                 arrival_s=stats.get("arrival_s") if schedule is not None or streams >= requests
                 else None)


def poisson(qps: float, seconds: float, seed: int = 1) -> list[float]:
    """Arrival times (seconds from the start) of a Poisson process at ``qps`` for ``seconds``."""
    rng = random.Random(seed)
    times, t = [], 0.0
    while (t := t + rng.expovariate(qps)) < seconds:
        times.append(t)
    return times


def main() -> None:
    """The server's child mode (see :class:`Server`)."""
    parser = argparse.ArgumentParser(description="the scripted server (Server's child)")
    add_server_flags(parser, 50.0, 5.0, 32)
    args = parser.parse_args()
    serve(args.ttft_ms, args.gap_ms, args.tokens, not args.no_keep_alive, args.handshake_ms)


if __name__ == "__main__":
    main()
