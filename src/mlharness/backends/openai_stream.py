"""An asyncio streaming client for OpenAI-compatible LLM servers (vLLM, SGLang, ...).

One coroutine per request on one event loop (no thread per stream), plain HTTP/1.1 on a
connection of its own: ``POST /v1/completions`` or ``/v1/chat/completions`` with
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
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from mlharness.backends.openai_sse import Bounds, EndpointError, Expected, SseResponse
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
        self._host, self._port = url.hostname, url.port or 80
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
        where = self.endpoint(chat)
        start = time.perf_counter()
        guard = _StallGuard(self.settings.stall_timeout_s)
        expected = Expected(max_tokens, min(vocab_size or INT32_LIMIT, INT32_LIMIT),
                            vocab_size is not None, eos_token_id)
        try:
            result = await self._stream(where, chat, body, guard, start, on_first_token,
                                        tokenize, expected)
        except asyncio.CancelledError:
            if guard.expired():
                came = (f"{guard.trickled} bytes trickled in, no whole event" if guard.trickled
                        else "nothing came")
                raise EndpointError(f"{where} stalled: no progress for "
                                    f"{self.settings.stall_timeout_s:g} s while {guard.what} "
                                    f"({came})", "the server is overloaded or hung; raise the "
                                    "openai backend option stall_timeout_s only if it is just "
                                    "slow") from None
            raise
        finally:
            guard.stop()
        if on_done is not None:
            await _maybe_await(on_done(result))
        return result

    async def _stream(self, where: str, chat: bool, body: dict[str, Any], guard: _StallGuard,
                      start: float, on_first_token: FirstToken | None,
                      tokenize: Callable[[str], list[int]] | None,
                      expected: Expected) -> StreamResult:
        pending: list[Awaitable[None]] = []

        def first(ids: list[int], text: str, at: float) -> None:
            if not ids:
                if tokenize is None:
                    raise _no_ids(where)
                ids = tokenize(text)[:expected.max_tokens]
            if on_first_token is not None:
                value = on_first_token(ids, at - start)
                if inspect.isawaitable(value):
                    pending.append(asyncio.ensure_future(value))

        response = SseResponse(where, chat, guard, first, self.settings.api_key_env, expected,
                               Bounds(max_event_bytes=self.settings.max_event_bytes,
                                      max_header_bytes=self.settings.max_header_bytes,
                                      error_body_s=min(Bounds.error_body_s,
                                                       self.settings.stall_timeout_s / 2)))
        await self._connect(where, response)
        try:
            self._send(response, "/v1/chat/completions" if chat else "/v1/completions", body)
            await response.done
        finally:
            if response.transport is not None:
                response.transport.close()
        for value in pending:
            await value
        ids, text = response.ids, "".join(response.text)
        if text and not ids:
            if tokenize is None:
                raise _no_ids(where)
            ids = tokenize(text)[:expected.max_tokens]
        total = time.perf_counter() - start
        ttft = response.first_at - start if response.first_at is not None else total
        return StreamResult(token_ids=ids, text=text, n_tokens=len(ids), ttft_s=ttft,
                            total_s=total, finish_reason=response.finish)

    async def _connect(self, where: str, response: SseResponse) -> None:
        loop = asyncio.get_running_loop()
        try:  # a timeout, not wait_for: no task of its own, three loop turns fewer to the send
            async with asyncio.timeout(self.settings.connect_timeout_s):
                transport, _ = await loop.create_connection(lambda: response, self._host,
                                                            self._port)
        except (OSError, TimeoutError) as exc:
            raise EndpointError(f"cannot connect to {where} ({type(exc).__name__}: {exc})",
                                "is the LLM server up and listening there?") from exc
        response.transport = transport  # uvloop calls connection_made only after this returns

    def _send(self, response: SseResponse, path: str, body: dict[str, Any]) -> None:
        payload = json.dumps(body).encode()
        head = [f"POST {self._prefix}{path} HTTP/1.1", f"Host: {self._hostport}",
                "Content-Type: application/json", "Accept: text/event-stream",
                f"Content-Length: {len(payload)}", "Connection: close"]
        if self._auth.reveal():
            head.append(f"Authorization: {self._auth.reveal()}")
        if response.transport is not None and not response.done.done():
            response.transport.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)


class _StallGuard:
    """Cancels the request's task when it has not progressed for ``stall_s`` (``expired``
    then says so): no whole header block or event, however many bytes trickled in. One timer
    per ``stall_s``, re-armed lazily from the time of the last progress: a timeout around every
    read (``asyncio.wait_for``: a task and a timer each) cost as much CPU as the rest of the
    client at a thousand streams."""

    __slots__ = ("_loop", "_task", "_stall_s", "_last", "_handle", "_fired", "what",
                 "trickled")

    def __init__(self, stall_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._stall_s = stall_s
        self._last = self._loop.time()
        self._fired = False
        self.what = "connecting"  # what the request was waiting for (in the message)
        self.trickled = 0  # bytes that came since the last progress
        self._handle = self._loop.call_at(self._last + stall_s, self._check)

    def touch(self) -> None:
        self._last = self._loop.time()
        self.trickled = 0

    def _check(self) -> None:
        due = self._last + self._stall_s
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


def _no_ids(where: str) -> EndpointError:
    return EndpointError(f"{where} streamed text but no token ids",
                         "use a server that returns them (vLLM: return_token_ids), or give the "
                         "model's tokenizer (openai backend: --backend-option tokenizer=DIR)")


async def _maybe_await(value: Awaitable[None] | None) -> None:
    if inspect.isawaitable(value):
        await value
