"""The openai backend's pool pre-warmed for the load against a fixed size, side by side (issue 50,
item 1): Poisson arrivals at ``--qps`` to the scripted server of ``llm_rounds.py``, whose new
connections cost ``--handshake-ms`` (a network's round trips or a TLS handshake: a request on a
connection is read no sooner than that after it came), more requests in flight than 256.

* sized: as a Server run pre-warms (``IssuePattern.of("Server", qps)`` after a timed warm-up
  request: the target QPS x the request's seconds x 2, ``openai_admit.paced_connections``);
* fixed: as every paced run did before, ``max_concurrency`` (256) connections whatever the rate.

A new backend each round (a round's connections would warm the next), the two alternating.
Each prints its round; then ``ADDED TTFT p99 ms sized vs fixed`` (each side's TTFT p99 less the
server's own p99 that round), and the connections each opened during the test, as median
[min-max] over ``--rounds``.

    .venv/bin/python benchmarks/prewarm.py [--qps 300] [--handshake-ms 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llm_rounds import (Round, Server, add_server_flags, harness_backend,  # noqa: E402
                        harness_round, poisson, pooled, request_s, spread)

from mlharness.backends.base import IssuePattern  # noqa: E402
from mlharness.collector import held_collector  # noqa: E402

SIDES = {"sized": lambda qps: IssuePattern.of("Server", qps),  # the target and the warm-up
         "fixed": lambda qps: IssuePattern(all_at_once=False)}  # no target: max_concurrency


def one_round(side: str, args: argparse.Namespace, server: Server,
              schedule: list[float]) -> tuple[Round, int, int]:
    """One paced round of ``side`` on a new backend: the round, the connections pre-warmed
    and those opened during the test."""
    backend = harness_backend(server.port, "auto", SIDES[side](args.qps), args.tokens)
    server.stats()  # the warm-up request is not the round's
    try:
        warm, opened_before = pooled(backend), pooled(backend, "opened")
        with held_collector():  # as a run's test (loadgen/session.py)
            result = harness_round(backend, server, 0, 0, args.tokens, schedule)
        opened = pooled(backend, "opened")
    finally:
        backend.close()
    result.side = side
    return result, warm, opened - opened_before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--qps", type=float, default=300.0, help="Poisson arrivals a second")
    parser.add_argument("--seconds", type=float, default=10.0, help="of arrivals a round")
    add_server_flags(parser, ttft_ms=1000.0, gap_ms=20.0, tokens=26, handshake_ms=30.0)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each side")
    args = parser.parse_args()
    each_s = request_s(args)
    server = Server(args)
    schedule = poisson(args.qps, args.seconds)
    print(f"pre-warm sized vs fixed: {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f}; {args.qps:g} QPS for {args.seconds:g} s ({len(schedule)} "
          f"requests), {each_s:.2f} s a request ({args.qps * each_s:,.0f} in flight by "
          f"Little's law), {args.handshake_ms:g} ms a new connection", flush=True)
    results: dict[str, list[tuple[Round, int, int]]] = {side: [] for side in SIDES}
    try:
        for _ in range(args.rounds):
            for side in SIDES:
                result, warm, opened = one_round(side, args, server, schedule)
                results[side].append((result, warm, opened))
                print(f"{result.line()}  pre-warmed {warm}, opened during the test {opened}",
                      flush=True)
    finally:
        server.close()
    sized, fixed = results["sized"], results["fixed"]
    print("ADDED TTFT p99 ms sized vs fixed = " + spread(
        [(s.added_ttft() - f.added_ttft()) * 1e3 for (s, _, _), (f, _, _) in zip(sized, fixed)],
        1))
    for side, rows in results.items():
        print(f"{side}: pre-warmed {spread([float(w) for _, w, _ in rows], 0)}, opened during "
              f"the test {spread([float(o) for _, _, o in rows], 0)}, added TTFT p99 ms "
              f"{spread([r.added_ttft() * 1e3 for r, _, _ in rows], 1)}")


if __name__ == "__main__":
    main()
