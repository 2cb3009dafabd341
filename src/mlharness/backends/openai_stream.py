"""An asyncio streaming client for OpenAI-compatible LLM servers (vLLM, SGLang, ...).

One coroutine per request on one event loop (no thread per stream), plain HTTP/1.1 on a
keep-alive connection from the server's pool (:mod:`~mlharness.backends.openai_pool`; a
reused connection the server had closed is retried once on a new one, only when nothing of the
answer came, and that is no failure): ``POST /v1/completions`` or ``/v1/chat/completions`` with
``"stream": true``, whose Server-Sent Events :class:`~mlharness.backends.openai_sse.SseResponse`
parses as they arrive (no coroutine step per token). It asks for the output token ids the
way vLLM returns them (``"return_token_ids": true`` gives ``token_ids`` in each chunk's choice;
``"token_id:N"`` logprob tokens are read too) and calls back at the first token (what LoadGen's
``FirstTokenComplete`` needs) and at the end (token ids and ``n_tokens`` for
``QuerySamplesComplete``). Each failure is an :class:`EndpointError` naming the endpoint.

The API key comes from an environment variable, is sent as ``Authorization: Bearer``, and
appears in no message, ``repr`` or log (it is registered with :mod:`mlharness.redact`, which
masks it, and what a server echoes of it, wherever this process writes). Credentials in the URL
(``http://user:pass@host``) are sent as ``Authorization: Basic`` when no key is set, and never
named: messages name the endpoint without them.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from mlharness.backends.openai_pool import ConnectionPool
from mlharness.backends.openai_sse import Bounds, EndpointError, Expected, SseResponse
from mlharness.backends.openai_transcribe import TRANSCRIPTIONS, multipart
from mlharness.errors import ConfigError
from mlharness.prompts import INT32_LIMIT
from mlharness.redact import register


class _Secret:
    """A value whose ``repr``/``str`` never show it (an API key)."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<secret>" if self._value else "<none>"

    __str__ = __repr__


class StreamResult(BaseModel):
    """One finished request: output ids, text, and its timing (seconds from the send)."""

    token_ids: list[int]
    text: str
    n_tokens: int
    ttft_s: float
    total_s: float
    finish_reason: str | None = None

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first, as LoadGen counts it: (total - ttft) / (n - 1)."""
        if self.n_tokens < 2:
            return None
        return (self.total_s - self.ttft_s) / (self.n_tokens - 1)


class ClientSettings(BaseModel):
    """Where and how to send requests."""

    base_url: str
    model: str
    api_key_env: str | None = "OPENAI_API_KEY"
    connect_timeout_s: float = Field(default=10.0, gt=0)
    #: no whole header block or event for this long: stalled (below the run's 60 s stall
    #: clock, so the request's own line names the endpoint first)
    stall_timeout_s: float = Field(default=30.0, gt=0)
    max_event_bytes: int = Field(default=Bounds.max_event_bytes, ge=1024)  # a body line
    max_header_bytes: int = Field(default=Bounds.max_header_bytes, ge=1024)
    #: ask for the output token ids (vLLM's ``return_token_ids``); False for servers that stream
    #: text only and refuse a key they do not know (``transformers serve`` answers 422), whose
    #: text ``complete``'s ``tokenize`` then turns into ids
    token_ids: bool = True


FirstToken = Callable[[list[int], float], Awaitable[None] | None]
Done = Callable[[StreamResult], Awaitable[None] | None]


class OpenAIStreamClient:
    """Streams completions from one server; safe to use from many coroutines at once."""

    def __init__(self, settings: ClientSettings) -> None:
        url = urlsplit(settings.base_url)
        if url.scheme != "http" or not url.hostname:
            raise ConfigError(f"LLM server URL {settings.base_url!r} is not http://host:port",
                              "e.g. http://127.0.0.1:8000 (https is not supported yet)")
        self.settings = settings
        self.activity = Activity()  # what this server streamed, over all requests
        self._host, self._port = url.hostname, url.port or 80
        self.pool = ConnectionPool(self._host, self._port, settings.connect_timeout_s)
        self._hostport = url.netloc.rpartition("@")[2]  # no credentials; IPv6 in brackets
        self._prefix = url.path.rstrip("/")
        #: the URL as messages name it: without credentials
        self.url = f"http://{self._hostport}{self._prefix}"
        key = os.environ.get(settings.api_key_env, "") if settings.api_key_env else ""
        register(key)
        if key:
            self._auth = _Secret(f"Bearer {key}")
        elif url.username is not None:
            register(url.password)
            basic = f"{url.username}:{url.password or ''}".encode()
            self._auth = _Secret(f"Basic {base64.b64encode(basic).decode()}")
            register(self._auth.reveal().split(" ", 1)[1])
        else:
            self._auth = _Secret("")

    def __repr__(self) -> str:
        return f"OpenAIStreamClient({self.url}, model={self.settings.model})"

    def endpoint(self, chat: bool) -> str:
        path = "/v1/chat/completions" if chat else "/v1/completions"
        return f"{self.url}{path}"

    async def complete(self, prompt: str | list[int] | list[dict[str, Any]], max_tokens: int,
                       on_first_token: FirstToken | None = None, on_done: Done | None = None,
                       chat: bool = False, tokenize: Callable[[str], list[int]] | None = None,
                       vocab_size: int | None = None, eos_token_id: int | None = None,
                       **extra: Any) -> StreamResult:
        """Send one prompt (text or token ids; chat: a list of messages) and stream the answer.

        ``on_first_token(ids, ttft_s)`` gets the first chunk's ids (vLLM may put more than one
        token in it; LoadGen's TEST06 compares them with the output's start); ``on_done`` gets
        the result; either may be a coroutine function. ``extra`` goes into the request body
        (a key given None is left out: ``temperature=None`` sends the server's default).
        ``tokenize`` (text -> ids) serves a server that streams text without token ids: the
        first chunk's text gives the first ids, the whole text the output's (at most
        ``max_tokens`` of them: the server's own count is unknown); without it such a stream is
        an error. An answer that breaks the request fails it (``openai_sse.Expected``): more
        than ``max_tokens`` tokens, ids that are not integers below ``vocab_size`` (int32's
        limit when None), tokens after ``eos_token_id``."""
        body: dict[str, Any] = {"model": self.settings.model, "max_tokens": max_tokens,
                                "temperature": 0, "stream": True}
        if self.settings.token_ids:
            body["return_token_ids"] = True
        body["messages" if chat else "prompt"] = prompt
        body.update(extra)
        for key in [k for k, v in extra.items() if v is None]:  # None: not sent at all
            del body[key]
        path = "/v1/chat/completions" if chat else "/v1/completions"
        expected = Expected(max_tokens, min(vocab_size or INT32_LIMIT, INT32_LIMIT),
                            vocab_size is not None, eos_token_id)
        payload = _Payload(path, json.dumps(body).encode(), "application/json")

        async def stream(guard: _StallGuard, start: float) -> StreamResult:
            response, reported = await self._exchange(payload, chat, guard, start,
                                                      on_first_token, tokenize, expected)
            ids, text = response.ids, "".join(response.text)
            if text and not ids:
                if tokenize is None:
                    raise _no_ids(self.url + path)
                ids = answer_ids(tokenize, text, reported)[:expected.max_tokens]
            return _result(response, ids, len(ids), start)

        def refusal(exc: EndpointError) -> str:
            return refusal_hint(exc, self.settings.model, chat, set(body), self.url)

        result = await self._guarded(self.url + path, stream, refusal)
        if on_done is not None:
            await _maybe_await(on_done(result))
        return result

    async def transcribe(self, audio: bytes, max_tokens: int,
                         on_first_token: FirstToken | None = None,
                         **fields: str) -> StreamResult:
        """Send one audio file to ``/v1/audio/transcriptions`` (a multipart form: the file, the
        model, ``max_completion_tokens``, ``stream`` and ``stream_include_usage``, then
        ``fields``) and stream its transcript. The stream is text without ids:
        ``on_first_token([], ttft_s)`` comes with the first piece, and the result's ``n_tokens``
        is the server's ``usage.completion_tokens`` (no ids: ``token_ids`` is empty). A stream
        that reports no count, or one above ``max_tokens`` or below its text pieces, fails as
        any broken answer, naming the endpoint."""
        where = self.url + TRANSCRIPTIONS
        form = {"model": self.settings.model, "max_completion_tokens": str(max_tokens),
                "stream": "true", "stream_include_usage": "true", **fields}
        body, content_type = multipart(form, audio)
        payload = _Payload(TRANSCRIPTIONS, body, content_type)
        expected = Expected(max_tokens)

        async def stream(guard: _StallGuard, start: float) -> StreamResult:
            response, _ = await self._exchange(payload, True, guard, start, on_first_token,
                                               lambda text: [], expected)
            count = response.completion_tokens
            pieces = len(response.text)
            if count is None:
                raise EndpointError(f"{where} streamed no usage.completion_tokens: LoadGen's "
                                    "n_tokens (tokens/s) cannot be measured without it",
                                    "a vLLM server sends it with stream_include_usage=true; "
                                    "is this an OpenAI-compatible transcription server?")
            if not pieces <= count <= max_tokens:
                raise EndpointError(f"{where} counted {count} completion_tokens for "
                                    f"{pieces} pieces of text of a request of at most "
                                    f"{max_tokens}", "an answer that breaks its request "
                                    "cannot be part of a result; see the server's log")
            return _result(response, [], count, start)

        return await self._guarded(where, stream)

    async def _guarded(self, where: str,
                       stream: Callable[[_StallGuard, float], Awaitable[StreamResult]],
                       refusal: Callable[[EndpointError], str] | None = None
                       ) -> StreamResult:
        """``stream(guard, start)`` under a stall guard: no progress for ``stall_timeout_s``
        (while no other request to this server progressed either, before its first token)
        ends it with one line naming ``where``, what it waited for and what trickled in. An
        HTTP refusal gets ``refusal``'s hint (the backend option that fixes it)."""
        start = time.perf_counter()
        guard = _StallGuard(self.settings.stall_timeout_s, self.activity)
        self.activity.in_flight += 1
        try:
            return await stream(guard, start)
        except EndpointError as exc:
            if exc.status and refusal is not None:  # name the option that fixes it, if one does
                raise EndpointError(exc.message, refusal(exc), exc.status, exc.said) from None
            raise
        except asyncio.CancelledError:
            if guard.expired():
                came = (f"{guard.trickled} bytes trickled in, no whole event" if guard.trickled
                        else "nothing came")
                others = self.activity.in_flight - 1
                raise EndpointError(f"{where} stalled: no progress for "
                                    f"{self.settings.stall_timeout_s:g} s while {guard.what} "
                                    f"({came}; nor from its {others} other requests in flight)"
                                    if others else
                                    f"{where} stalled: no progress for "
                                    f"{self.settings.stall_timeout_s:g} s while {guard.what} "
                                    f"({came})", "the server is overloaded or hung; raise the "
                                    "openai backend option stall_timeout_s only if it is just "
                                    "slow") from None
            raise
        finally:
            guard.stop()
            self.activity.in_flight -= 1

    async def _exchange(self, payload: _Payload, chat: bool, guard: _StallGuard, start: float,
                        on_first_token: FirstToken | None,
                        tokenize: Callable[[str], list[int]] | None,
                        expected: Expected) -> tuple[SseResponse, list[int]]:
        """Send ``payload`` and read the streamed response to its end, within the bounds;
        returns it and the ids LoadGen got as the first token."""
        where = self.url + payload.path
        pending: list[Awaitable[None]] = []
        reported: list[int] = []

        def first(ids: list[int], text: str, at: float) -> None:
            if not ids:
                if tokenize is None:
                    raise _no_ids(where)
                # one id: the first of the chunk's text, which the whole answer's ids will
                # begin with (answer_ids); a chunk's later ids are the likeliest to change
                # once more text follows ("A " alone ends in a space token, "A tree" does not)
                ids = tokenize(text)[:1]
            reported[:] = ids
            self.activity.first_tokens += 1
            if on_first_token is not None:
                value = on_first_token(ids, at - start)
                if inspect.isawaitable(value):
                    pending.append(asyncio.ensure_future(value))

        bounds = Bounds(max_event_bytes=self.settings.max_event_bytes,
                        max_header_bytes=self.settings.max_header_bytes,
                        error_body_s=min(Bounds.error_body_s, self.settings.stall_timeout_s / 2))
        fresh = False
        while True:
            conn = await self.pool.take(where, fresh)
            response = SseResponse(where, chat, guard, first, self.settings.api_key_env,
                                   expected, bounds, conn.release)
            conn.attach(response)
            try:
                self._send(response, payload)
                await response.done
            except EndpointError:
                # a reused connection the server closed while it was idle: once more on a new
                # one, if nothing of the answer came (the request cannot have begun there)
                if conn.pooled and not fresh and response.lost and not response.received:
                    self.pool.retried_stale(conn)
                    fresh = True
                    guard.what = "connecting"
                    continue
                raise
            finally:
                if not response.done.done():  # cancelled: the connection goes with it
                    response.abandon()
            break
        for value in pending:
            await value
        return response, reported

    async def prewarm(self, n: int) -> int:
        """Open connections until ``n`` are idle in the pool, before the load; how many opened."""
        return await self.pool.prewarm(n, self.url)

    def _send(self, response: SseResponse, payload: _Payload) -> None:
        head = [f"POST {self._prefix}{payload.path} HTTP/1.1", f"Host: {self._hostport}",
                f"Content-Type: {payload.content_type}", "Accept: text/event-stream",
                f"Content-Length: {len(payload.body)}"]
        if self._auth.reveal():
            head.append(f"Authorization: {self._auth.reveal()}")
        if response.transport is not None and not response.done.done():
            response.transport.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload.body)


@dataclass(frozen=True)
class _Payload:
    """What one request sends: its path, body and content type."""

    path: str
    body: bytes
    content_type: str


def _result(response: SseResponse, ids: list[int], n_tokens: int, start: float
            ) -> StreamResult:
    total = time.perf_counter() - start
    ttft = response.first_at - start if response.first_at is not None else total
    return StreamResult(token_ids=ids, text="".join(response.text), n_tokens=n_tokens,
                        ttft_s=ttft, total_s=total, finish_reason=response.finish)


#: what a request's guard says once its first token came (``SseResponse``)
STREAMING = "streaming"


class Activity:
    """What one server streamed, over all its requests: ``events`` (whole header blocks and
    events) and the loop time of the last, ``first_tokens`` answers begun, and ``in_flight``
    requests. A request waiting for its first token while the server streams others is
    queued there, not stalled (its guard reads ``last``); the backend's concurrency search
    reads the counts. Touched on the loop's thread only."""

    __slots__ = ("events", "last", "first_tokens", "in_flight")

    def __init__(self) -> None:
        self.events = 0
        self.last = 0.0
        self.first_tokens = 0
        self.in_flight = 0


class _StallGuard:
    """Cancels the request's task when it has not progressed for ``stall_s`` (``expired`` then
    says so): no whole header block or event, however many bytes trickled in; before its first
    token, while no other request to its server progressed either (it is queued there). One timer per ``stall_s``, re-armed lazily from the time of
    the last progress: a timeout around every read (``asyncio.wait_for``: a task and a timer
    each) cost as much CPU as the rest of the client at a thousand streams."""

    __slots__ = ("_loop", "_task", "_stall_s", "_last", "_handle", "_fired", "what",
                 "trickled", "_server")

    def __init__(self, stall_s: float, server: Activity | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._stall_s = stall_s
        self._last = self._loop.time()
        self._server = server if server is not None else Activity()
        self._fired = False
        self.what = "connecting"  # what the request was waiting for (in the message)
        self.trickled = 0  # bytes that came since the last progress
        self._handle = self._loop.call_at(self._last + stall_s, self._check)

    def touch(self) -> None:
        self._last = self._server.last = self._loop.time()
        self._server.events += 1
        self.trickled = 0

    def _check(self) -> None:
        # streaming: its own clock; before its first token: queued while the server streams
        last = self._last if self.what == STREAMING else max(self._last, self._server.last)
        due = last + self._stall_s
        if self._loop.time() < due:
            self._handle = self._loop.call_at(due, self._check)
        elif self._task is not None:
            self._fired = True
            self._task.cancel()

    def expired(self) -> bool:
        """Whether the cancellation being handled is this guard's (and only its)."""
        return self._fired and self._task is not None and self._task.uncancel() == 0

    def stop(self) -> None:
        self._handle.cancel()


def answer_ids(tokenize: Callable[[str], list[int]], text: str, first: list[int]) -> list[int]:
    """The ids of a text-only server's whole answer: ``tokenize.answer`` where the tokenizer
    has one (the answer's ids begin with ``first``, the ids LoadGen got as its first token,
    which TEST06 compares), else plain ``tokenize(text)``."""
    if isinstance(tokenize, TextTokenizer):
        return tokenize.answer(text, first)
    return tokenize(text)


class TextTokenizer:
    """Text -> token ids by the model's tokenizer (no special tokens) for a server that streams
    text, from an ``encode`` and a ``decode``. A whole answer's ids: the text tokenized
    whole when that begins with ``first`` (nearly always); else ``first`` followed by the rest of
    the text tokenized, when that decodes to the same text; else the whole text's ids (the
    first-token check of TEST06 would then fail for it)."""

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: list[int]) -> str:
        raise NotImplementedError

    def __call__(self, text: str) -> list[int]:
        return self.encode(text)

    def answer(self, text: str, first: list[int]) -> list[int]:
        ids = self.encode(text)
        if not first or ids[:len(first)] == first:
            return ids
        head = self.decode(first)
        if not head or not text.startswith(head):
            return ids
        spliced = list(first) + self.encode(text[len(head):])
        return spliced if self.decode(spliced) == self.decode(ids) else ids


#: request keys vLLM reads that OpenAI's API lacks (the openai backend's ``extensions``); a
#: strict server (``transformers serve``) refuses each with HTTP 422
EXTENSION_KEYS = ("return_token_ids", "min_tokens", "top_k", "chat_template")


def refusal_hint(exc: EndpointError, model: str, chat: bool, sent: set[str], url: str) -> str:
    """The hint of an HTTP refusal: the ``--backend-option`` that fixes it where the status and
    the server's words tell which (extensions, chat, served_model), else the refusal's own."""
    said = exc.said.lower()
    named_model = "model" in said or (model and model.lower() in said)
    refused = [k for k in EXTENSION_KEYS if k in sent and k in said]
    if "trust-request-chat-template" in said:
        return ("vLLM refuses the benchmark's reference chat template unless started with "
                "--trust-request-chat-template (as the MLCommons endpoints client needs); or give "
                "--backend-option chat_template=false for the server's own template")
    if exc.status in (400, 422) and refused:
        return (f"this server refuses {', '.join(refused)}, which OpenAI's API lacks: give "
                "--backend-option extensions=false (and tokenizer=DIR, the model's tokenizer: "
                "such a server streams text, not token ids)")
    if exc.status == 404 and not named_model:
        if not chat:
            return ("no /v1/completions there: check the URL; a server that offers only chat "
                    "(transformers serve) needs --backend-option chat=true")
        return ("no /v1/chat/completions there: check the URL; a server without chat needs "
                "--backend-option chat=true left out (prompts then go to /v1/completions)")
    if exc.status in (400, 404) and named_model:
        return (f"is served_model={model!r} the name this server knows the model by? give "
                f"--backend-option served_model=NAME as it lists it (GET {url}/v1/models)")
    if exc.status == 500:
        return (f"see the server's log; a model the server cannot load is one cause: "
                f"served_model={model!r} must be the name (transformers serve: the model's "
                "directory or hub id) of a model it can load, with a chat template for chat")
    return exc.hint


def _no_ids(where: str) -> EndpointError:
    return EndpointError(f"{where} streamed text but no token ids",
                         "use a server that returns them (vLLM: return_token_ids), or give the "
                         "model's tokenizer (openai backend: --backend-option tokenizer=DIR)")


async def _maybe_await(value: Awaitable[None] | None) -> None:
    if inspect.isawaitable(value):
        await value
