"""The streaming SUT of the LLM benchmarks: each issued sample becomes one generation request to
a text-generation backend, whose first token and whole answer go to LoadGen as they arrive.

LoadGen's side is two callables supplied by the LoadGen adapter: ``first_token(id, ids)``
(``FirstTokenComplete``) and ``complete(id, payload, n_tokens)`` (``QuerySamplesComplete``; the
payload is the task's encoding of the generated ids, ``GenerationTask.encode_output``).
The backend calls back from its own threads; no thread per request here. When the backend fails
a request, the engine records the failure, answers every outstanding and later sample with an
empty response so LoadGen never waits forever, and calls ``on_failure`` once (as ``Engine``).
An answer that breaks its request (more tokens than asked, ids that are not int32 integers) is
such a failure: a result made of it could not be trusted.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence

from mlharness.backends.base import GenerationRequest, StreamingBackend
from mlharness.prompts import generated_tokens
from mlharness.tasks.base import GenerationTask

TokenSink = Callable[[int, Sequence[int]], None]
#: ``(LoadGen id, response payload, n_tokens)``
AnswerSink = Callable[[int, bytes, int], None]


class StreamEngine:
    """Issues LoadGen's samples to a streaming backend and reports tokens back."""

    def __init__(self, task: GenerationTask, backend: StreamingBackend, first_token: TokenSink,
                 complete: AnswerSink, on_failure: Callable[[str], None] | None = None) -> None:
        self.task = task
        self.backend = backend
        self._first_token = first_token
        self._complete = complete
        self._on_failure = on_failure
        self._lock = threading.Lock()
        self._outstanding: dict[int, bool] = {}  # LoadGen id -> first token reported
        self.completed = 0  # samples answered (progress)
        self.tokens = 0  # output tokens reported
        self.failure: str | None = None
        self.failure_traceback = ""
        # what the worker reports as it does for the batching engine
        self.batches = 0
        self.warmup_shapes: list[Any] = []

    # ---- LoadGen's calls ------------------------------------------------------------------------

    def issue(self, ids: Sequence[int], indices: Sequence[int]) -> None:
        for rid, index in zip(ids, indices):
            with self._lock:
                failed = self.failure is not None
                if not failed:
                    self._outstanding[rid] = False
            if failed:
                self._answer_empty(rid)
                continue
            self.batches += 1
            request = self.task.request(index)
            self.backend.submit(request, self._on_first(rid), self._on_done(rid, index, request),
                                self._on_error(rid))

    def flush(self) -> None:
        """Nothing is held back: every sample is submitted when issued."""

    def start(self) -> None:
        """The backend's own threads do the work."""

    def stop(self) -> None:
        """Answer what is still outstanding (a run ended early), so LoadGen can finish."""
        with self._lock:
            left = dict(self._outstanding)
            self._outstanding.clear()
        for rid, reported in left.items():
            self._answer_empty(rid, reported)

    # ---- the backend's calls --------------------------------------------------------------------

    def _on_first(self, rid: int) -> Callable[[list[int]], None]:
        def first(ids: list[int]) -> None:
            with self._lock:
                if self._outstanding.get(rid) is not False:
                    return  # reported already, or answered after a failure
                self._outstanding[rid] = True
            self._first_token(rid, ids)
        return first

    def _on_done(self, rid: int, index: int, request: GenerationRequest
                 ) -> Callable[[list[int]], None]:
        def done(ids: list[int]) -> None:
            problem = request.answer_problem(ids, tokenizer=False)
            if problem is not None:
                self._on_error(rid)(f"the {self.backend.name} backend answered against the "
                                    f"request: {problem}")
                return
            n_tokens = generated_tokens(ids)
            with self._lock:
                if rid not in self._outstanding:
                    return
                reported = self._outstanding.pop(rid)
                self.tokens += n_tokens
            if not reported:  # a backend that found no first token (an empty answer)
                self._first_token(rid, ids[:1])
            self._complete(rid, self.task.encode_output(index, ids), n_tokens)
            self.completed += 1
        return done

    def _on_error(self, rid: int) -> Callable[[str], None]:
        def error(message: str) -> None:
            with self._lock:
                first = self.failure is None
                if first:
                    self.failure = message
                reported = self._outstanding.pop(rid, None)
            if reported is not None:
                self._answer_empty(rid, reported)
            if first:
                self.stop()  # the run is over: LoadGen must not wait for the others
                if self._on_failure is not None:
                    self._on_failure(message)
        return error

    def _answer_empty(self, rid: int, reported: bool = False) -> None:
        if not reported:
            self._first_token(rid, [])
        self._complete(rid, b"", 0)
        self.completed += 1

    # ---- warm-up ----------------------------------------------------------------------------

    def warm_up(self, requests: int, index: int = 0, timeout_s: float | None = None) -> float:
        """``requests`` untimed generations of sample ``index``, one after another; seconds."""
        t0 = time.perf_counter()
        for _ in range(requests):
            self._one_untimed(index, timeout_s)
        return time.perf_counter() - t0

    def _one_untimed(self, index: int, timeout_s: float | None) -> None:
        finished = threading.Event()
        errors: list[str] = []

        def failed(message: str) -> None:
            errors.append(message)
            finished.set()

        self.backend.submit(self.task.request(index), lambda ids: None,
                            lambda ids: finished.set(), failed)
        finished.wait(timeout_s)
        if errors:
            raise RuntimeError(errors[0])
