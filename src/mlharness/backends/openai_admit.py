"""How many requests the openai backend keeps in flight: a number given, or measured.

A fixed ``concurrency=N`` admits N requests at once (the rest wait, in order). ``auto`` (the
default) sends paced queries (Server, Interactive) as they come, with no limit at all (a client
limit would only add its queue to their TTFT: LoadGen measures from the query's issue), and,
when LoadGen issues every sample at once
(Offline), measures what the servers sustain instead of flooding them. Whatever the limit, the
first request goes alone until its answer begins: ``transformers serve`` loads its model at its
first request, and several first requests at once load it in several threads that break each
other ("Cannot copy out of meta tensor", HTTP 500). Then: it starts at ``START``
requests and, while requests are waiting for a slot (the servers, not the load, are the limit),
doubles the limit as long as each doubling streams at least ``GAIN`` more events per second than
the best level so far; when one does not, it settles on that best level. Each level is measured
once its requests have begun streaming (``first tokens`` as many as the level, or ``RAMP_MAX_S``),
over ``WINDOW_S`` and at least ``MIN_EVENTS`` events (at most ``MAX_WINDOW_S``). A server that
batches (vLLM, SGLang) gains at every doubling up to ``cap``; one that generates each request
apart on a CPU (``transformers serve``) gains nothing past a few, and 100 requests at once would
make each wait minutes for its first token. The levels tried and where it settled are recorded
(run.json ``sut.stream_report``), with the requests that waited for a slot (``held``) and the
longest wait; when paced queries waited (a given ``concurrency``, or the first answer's gate)
the report's ``bound`` says which limit held them, and the run's reasons repeat it.

The connections worth opening before the test (``expected``) are the limit's; under paced
queries without one, :func:`paced_connections` sizes them from the load.
"""

from __future__ import annotations

import asyncio
import math
import sys
from collections import deque
from typing import Any

from mlharness.backends.base import IssuePattern

START = 8  # requests in flight at first (auto)
GAIN = 1.10  # a doubling is kept when it streams 10 % more than the best level so far
WINDOW_S = 2.0  # a level's measurement lasts at least this ...
MIN_EVENTS = 64  # ... and holds this many events ...
MAX_WINDOW_S = 20.0  # ... unless this long passed
RAMP_MAX_S = 30.0  # waiting for a new level's requests to begin streaming, at most


#: paced queries (Server, Interactive) are expected in flight as Little's law says: LoadGen's
#: target QPS times one request's seconds (the warm-up's), times this margin: a loaded server
#: answers slower than the warm-up's lone request (more connections open on demand)
PACED_MARGIN = 2.0
#: and no fewer than this many (Poisson arrivals come in bursts)
PACED_FLOOR = 8


def paced_connections(pattern: IssuePattern, cap: int, spare: int | None) -> tuple[int, str]:
    """Connections worth opening before a paced test, and why, in words: one for SingleStream,
    Little's law's for a target rate and a warm-up's request time, else ``cap``
    (``max_concurrency``); never more than ``spare`` (half the file descriptors)."""
    if pattern.sequential:
        return 1, "one query at a time (SingleStream)"
    if pattern.target_qps is None or not pattern.request_s:
        missing = "no target QPS" if pattern.target_qps is None else "no warm-up request timed"
        n, why = cap, f"max_concurrency ({missing})"
    else:
        n = max(PACED_FLOOR, math.ceil(pattern.target_qps * pattern.request_s * PACED_MARGIN))
        why = (f"{pattern.target_qps:g} QPS x {pattern.request_s:.3f} s a warm-up request x "
               f"{PACED_MARGIN:g} (Little's law with a margin, at least {PACED_FLOOR})")
    if spare is not None and n > spare:
        n, why = spare, f"{why}, bounded by half the file-descriptor limit"
    return n, why


class Admission:
    """A semaphore whose limit is given (``limit``) or measured (``None``: ``auto``, up to
    ``cap``). Used on one event loop; ``observe`` is called on a timer with the servers'
    event and first-token counts."""

    def __init__(self, limit: int | None, cap: int) -> None:
        self.measured = limit is None
        self.paced = False  # auto under paced queries: no limit, nothing measured
        self.paced_load = False  # LoadGen paces the queries (whatever the limit)
        self.paced_expected = cap  # paced, no limit: the connections worth opening
        self.expected_from = ""  # ... and why (paced_connections)
        self.held = 0  # requests that waited for a slot
        self.held_first = 0  # of them, behind the first request (before its answer began)
        self.longest_wait_s = 0.0
        self.cap = cap
        self.limit = min(cap, START) if limit is None else limit
        self.in_flight = 0
        self.peak = 0  # the most requests in flight at once
        self.levels: list[dict[str, Any]] = []  # each level measured: limit, events/s
        self.settled: int | None = None
        self._waiters: deque[asyncio.Future[None]] = deque()
        #: until the first answer begins, one request at a time: a server that loads its model
        #: at its first request (transformers serve) breaks when many arrive together
        self.opened = False
        self._phase = "idle"  # idle | ramp | measure
        self._t0 = 0.0
        self._mark = 0  # events (measure) or first tokens (ramp) when the phase began

    # -- the semaphore ----------------------------------------------------------------------

    @property
    def _room(self) -> int:
        if not self.opened:
            return 1
        return sys.maxsize if self.paced else self.limit

    @property
    def expected(self) -> int:
        """Requests expected in flight at once (the connections worth opening beforehand): the
        limit, or under paced queries without one, what :meth:`pace` was told."""
        return self.paced_expected if self.paced else self.limit

    def open(self) -> None:
        """The first answer began (or ended): the limit applies from now on."""
        if not self.opened:
            self.opened = True
            self._wake()

    async def acquire(self) -> None:
        if self.in_flight < self._room and not self._waiters:
            self._admit()
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        since, gated = loop.time(), not self.opened
        try:
            await waiter
            self.held += 1
            self.held_first += gated
            self.longest_wait_s = max(self.longest_wait_s, loop.time() - since)
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # granted, then cancelled: give back
                self.release()
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        self.in_flight -= 1
        self._wake()

    def _admit(self) -> None:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)

    def _wake(self) -> None:
        while self._waiters and self.in_flight < self._room:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._admit()
                waiter.set_result(None)

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def pace(self, expected: int, why: str) -> None:
        """LoadGen paces the queries (Server, Interactive, SingleStream): auto searches nothing
        and limits nothing, and ``expected`` requests are expected in flight (``why``, in
        words); a given limit stays (and is named in the report when it holds a query)."""
        self.paced_load = True
        self.paced_expected, self.expected_from = expected, why
        if self.measured:
            self.measured, self.paced = False, True
            self.limit = self.cap
            self._wake()

    # -- the search -------------------------------------------------------------------------

    def observe(self, now: float, events: int, first_tokens: int) -> None:
        """One look at the servers (``now``: the loop's time; ``events``, ``first_tokens``:
        their running totals): raises the limit while that streams more, else settles."""
        if first_tokens and not self.opened:
            self.open()
        if not self.measured or self.settled is not None:
            return
        saturated = bool(self._waiters) and self.in_flight >= self.limit
        if not saturated:  # the load, not the servers, limits: nothing to learn now
            self._phase = "idle"
            return
        if self._phase == "idle":
            self._begin("ramp", now, first_tokens)
        if self._phase == "ramp":
            if first_tokens - self._mark < self.limit and now - self._t0 < RAMP_MAX_S:
                return
            self._begin("measure", now, events)
        span, got = now - self._t0, events - self._mark
        if span < WINDOW_S or (got < MIN_EVENTS and span < MAX_WINDOW_S):
            return
        rate = got / span
        best = max(self.levels, key=lambda level: level["events_per_s"], default=None)
        self.levels.append({"limit": self.limit, "events_per_s": round(rate, 2)})
        if self.limit < self.cap and (best is None or rate > best["events_per_s"] * GAIN):
            self.limit = min(self.cap, self.limit * 2)
            self._begin("ramp", now, first_tokens)
            self._wake()
        else:
            keep = best if best is not None and best["events_per_s"] * GAIN >= rate else None
            self.limit = self.settled = keep["limit"] if keep is not None else self.limit
            self._phase = "idle"

    def _begin(self, phase: str, now: float, mark: int) -> None:
        self._phase, self._t0, self._mark = phase, now, mark

    def bound(self) -> str | None:
        """Which client-side limit held paced queries back (their TTFT counts the wait), in
        words; None: none did (or the load is not paced: Offline's limit is its purpose)."""
        if not self.paced_load or not self.held:
            return None
        wait = f"up to {self.longest_wait_s:.2f} s, counted in their TTFT"
        parts = []
        if self.held - self.held_first:
            parts.append(f"the openai backend's concurrency={self.limit} held "
                         f"{self.held - self.held_first} paced queries back ({wait}; leave "
                         "concurrency out: auto sends paced queries as they come)")
        if self.held_first:
            parts.append(f"{self.held_first} paced queries waited for the first request's "
                         f"answer to begin ({wait}; a server loads its model then: give "
                         "--warmup to send one before the test)")
        return "; ".join(parts)

    def report(self) -> dict[str, Any]:
        """For run.json: how the limit was chosen, the most requests in flight at once and the
        requests that waited for a slot (the limit that held paced ones: :meth:`bound`)."""
        waits = {"held": self.held, "longest_wait_s": round(self.longest_wait_s, 3)}
        if self.paced:
            return {"mode": "paced: LoadGen's queries go out as they come, no client limit",
                    "expected": self.paced_expected, "expected_from": self.expected_from,
                    "peak_in_flight": self.peak, **waits}
        if not self.measured:
            return {"mode": "given", "limit": self.limit, "peak_in_flight": self.peak, **waits}
        return {"mode": "measured", "start": min(self.cap, START), "cap": self.cap,
                "levels": list(self.levels), "settled": self.settled, "limit": self.limit,
                "peak_in_flight": self.peak, **waits,
                "unit": "events/s: streamed chunks of all requests (a token or more each)"}
