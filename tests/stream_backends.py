"""A scripted text-generation backend for tests (``--backend stream_backends:TimedStream``):
the first token ``ttft_s`` after submit, then one token every ``gap_s`` up to ``n_tokens``; all on
one timer thread, as a real streaming backend would (no thread per request). Output ids are
``first_id + k`` (or, with ``outputs=FILE``, the answer that file gives the prompt);
``fail_at`` (a request number, 1-based) fails that request.

A loaded server, for tests whose latency limits must bind at a known rate (tune):

* ``gap_per_stream_s``: each stream's time per output token grows with the streams generating
  when it starts (itself included): ``gap_s + gap_per_stream_s x streams`` (decode steps shared
  by the batch), so TPOT rises with the offered load;
* ``max_streams``: at most this many generate at once; the others wait in FIFO order, and the
  wait is part of their time to first token (prefill queueing), so TTFT grows without bound
  once requests arrive faster than ``max_streams / stream time``.

Faults TEST06 must catch: ``bad_first=1`` reports a first token other than the output's,
``eos=ID`` ends every output in ``eos_repeat`` (default 2) tokens ``ID``.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import json
import threading
import time
from pathlib import Path
from typing import Any, Callable

from mlharness.backends.base import BackendOptions, StreamingBackend
from mlharness.options import Options


class TimedOptions(Options):
    """``--backend-option`` keys of :class:`TimedStream` (the module docstring says what each
    does)."""

    ttft_s: float = 0.02
    gap_s: float = 0.002
    gap_per_stream_s: float = 0.0
    max_streams: int = 0  # 0: no limit
    n_tokens: int = 8
    first_id: int = 100
    fail_at: int = 0
    outputs: Path | None = None  # a JSON list of [prompt ids, output ids]: that prompt's answer
    bad_first: bool = False
    eos: int | None = None
    eos_repeat: int = 2


class TimedStream(StreamingBackend):
    name = "timed"
    concurrency = 1024
    options_model = TimedOptions

    def load(self, model: Path | None, options: BackendOptions) -> None:
        opts = options.extra_as(TimedOptions)
        self.ttft_s, self.gap_s, self.gap_per_stream_s = opts.ttft_s, opts.gap_s, \
            opts.gap_per_stream_s
        self.max_streams, self.n_tokens, self.first_id = opts.max_streams, opts.n_tokens, \
            opts.first_id
        self.fail_at, self.bad_first = opts.fail_at, opts.bad_first
        self.outputs = {tuple(p): list(o) for p, o in json.loads(
            opts.outputs.read_text())} if opts.outputs else {}
        self.eos, self.eos_repeat = opts.eos, opts.eos_repeat
        self.submitted = 0
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._closed = False
        self._streams = 0  # generating now
        self._waiting: collections.deque[tuple[Any, ...]] = collections.deque()
        self._thread = threading.Thread(target=self._loop, name="timed-stream", daemon=True)
        self._thread.start()

    @property
    def inputs(self) -> None:
        return None

    def _at(self, when: float, action: Callable[[], None]) -> None:
        with self._cv:
            heapq.heappush(self._events, (when, next(self._seq), action))
            self._cv.notify()

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._closed and (not self._events
                                            or self._events[0][0] > time.perf_counter()):
                    wait = self._events[0][0] - time.perf_counter() if self._events else None
                    self._cv.wait(wait)
                if self._closed:
                    return
                _, _, action = heapq.heappop(self._events)
            action()

    def submit(self, request: Any, on_first: Any, on_done: Any, on_error: Any) -> None:
        self.submitted += 1
        now = time.perf_counter()
        if self.fail_at and self.submitted == self.fail_at:
            message = f"scripted failure of request {self.fail_at}"
            self._at(now + self.ttft_s, lambda: on_error(message))
            return
        with self._cv:
            if self.max_streams and self._streams >= self.max_streams:
                self._waiting.append((request, on_first, on_done))
                return
            self._streams += 1
            streams = self._streams
        self._start(now, streams, request, on_first, on_done)

    def _answer(self, request: Any) -> list[int]:
        if self.outputs:
            ids = self.outputs[tuple(request.input_ids)][:request.max_new_tokens]
        else:
            ids = [self.first_id + k for k in range(min(self.n_tokens, request.max_new_tokens))]
        if self.eos is not None:
            ids = ids[:max(0, len(ids) - self.eos_repeat)] + [self.eos] * self.eos_repeat
        return ids

    def _start(self, now: float, streams: int, request: Any, on_first: Any,
               on_done: Any) -> None:
        ids = self._answer(request)
        first = [ids[0] + 1] if self.bad_first else ids[:1]
        gap = self.gap_s + self.gap_per_stream_s * streams
        end = now + self.ttft_s + gap * (len(ids) - 1)
        self._at(now + self.ttft_s, lambda: on_first(first))
        self._at(end, lambda: self._finish(end, ids, on_done))

    def _finish(self, now: float, ids: list[int], on_done: Any) -> None:
        with self._cv:
            self._streams -= 1
            queued = self._waiting.popleft() if self._waiting else None
            if queued is not None:
                self._streams += 1
            streams = self._streams
        on_done(ids)
        if queued is not None:  # the slot goes to the longest waiting request
            self._start(now, streams, *queued)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join(5)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "ttft_s": self.ttft_s, "gap_s": self.gap_s,
                "n_tokens": self.n_tokens}
