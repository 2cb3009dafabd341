"""An asyncio streaming client for OpenAI-compatible LLM servers (vLLM, SGLang, ...).

One coroutine per request on one event loop (no thread per stream), plain HTTP/1.1 over
``asyncio.open_connection``: ``POST /v1/completions`` or ``/v1/chat/completions`` with
``"stream": true``, Server-Sent Events read as they arrive. It asks for the output token ids the
way vLLM returns them (``"return_token_ids": true`` gives ``token_ids`` in each chunk's choice;
``"token_id:N"`` logprob tokens are read too) and calls back at the first token (what LoadGen's
``FirstTokenComplete`` needs) and at the end (token ids and ``n_tokens`` for
``QuerySamplesComplete``). Each failure is an :class:`EndpointError` naming the endpoint.

The API key comes from an environment variable, is sent as ``Authorization: Bearer``, and
appears in no message, ``repr`` or log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from mlharness.errors import ConfigError, RunFailed


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


class EndpointError(RunFailed):
    """The LLM server failed a request (refused, HTTP error, stalled, dropped, malformed)."""


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
    stall_timeout_s: float = Field(default=120.0, gt=0)  # no byte for this long: stalled
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
        self._prefix = url.path.rstrip("/")
        self._key = _Secret(os.environ.get(settings.api_key_env, "")
                            if settings.api_key_env else "")

    def __repr__(self) -> str:
        return f"OpenAIStreamClient({self.settings.base_url}, model={self.settings.model})"

    def endpoint(self, chat: bool) -> str:
        path = "/v1/chat/completions" if chat else "/v1/completions"
        return f"{self.settings.base_url.rstrip('/')}{path}"

    async def complete(self, prompt: str | list[int] | list[dict[str, str]], max_tokens: int,
                       on_first_token: FirstToken | None = None, on_done: Done | None = None,
                       chat: bool = False, tokenize: Callable[[str], list[int]] | None = None,
                       **extra: Any) -> StreamResult:
        """Send one prompt (text or token ids; chat: a list of messages) and stream the answer.

        ``on_first_token(ids, ttft_s)`` gets the first chunk's ids (vLLM may put more than one
        token in it; LoadGen's TEST06 compares them with the output's start); ``on_done`` gets
        the result; either may be a coroutine function. ``extra`` goes into the request body.
        ``tokenize`` (text -> ids) serves a server that streams text without token ids: the
        first chunk's text gives the first ids, the whole text the output's; without it such a
        stream is an error."""
        body: dict[str, Any] = {"model": self.settings.model, "max_tokens": max_tokens,
                                "temperature": 0, "stream": True}
        if self.settings.token_ids:
            body["return_token_ids"] = True
        body["messages" if chat else "prompt"] = prompt
        body.update(extra)
        where = self.endpoint(chat)
        start = time.perf_counter()
        guard = _StallGuard(self.settings.stall_timeout_s)
        try:
            result = await self._stream(where, chat, body, guard, start, on_first_token,
                                        tokenize)
        except asyncio.CancelledError:
            if guard.expired():
                raise EndpointError(f"{where} stalled: nothing for "
                                    f"{self.settings.stall_timeout_s:g} s while {guard.what}",
                                    "the server is overloaded or hung; raise stall_timeout_s "
                                    "only if it is just slow") from None
            raise
        finally:
            guard.stop()
        if on_done is not None:
            await _maybe_await(on_done(result))
        return result

    async def _stream(self, where: str, chat: bool, body: dict[str, Any], guard: _StallGuard,
                      start: float, on_first_token: FirstToken | None,
                      tokenize: Callable[[str], list[int]] | None) -> StreamResult:
        reader, writer = await self._connect(where)
        try:
            await self._send(writer, "/v1/chat/completions" if chat else "/v1/completions", body)
            framing = await self._read_head(reader, where, guard)
            ids: list[int] = []
            text: list[str] = []
            ttft: float | None = None
            finish: str | None = None
            async for event in self._events(reader, where, guard, framing, lambda: len(ids)):
                choice = (event.get("choices") or [{}])[0]
                new_ids, new_text = _tokens_of(choice, chat)
                if new_ids or new_text:
                    if ttft is None:
                        ttft = time.perf_counter() - start
                        if not new_ids and tokenize is None:
                            raise _no_ids(where)
                        first = new_ids or (tokenize(new_text) if tokenize else [])
                        if on_first_token is not None:
                            await _maybe_await(on_first_token(list(first), ttft))
                    ids.extend(new_ids)
                    text.append(new_text)
                finish = choice.get("finish_reason") or finish
            if any(text) and not ids:
                if tokenize is None:
                    raise _no_ids(where)
                ids = tokenize("".join(text))
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        total = time.perf_counter() - start
        return StreamResult(token_ids=ids, text="".join(text), n_tokens=len(ids),
                            ttft_s=ttft if ttft is not None else total, total_s=total,
                            finish_reason=finish)

    async def _connect(self, where: str):
        try:
            return await asyncio.wait_for(asyncio.open_connection(self._host, self._port),
                                          self.settings.connect_timeout_s)
        except (OSError, TimeoutError) as exc:
            raise EndpointError(f"cannot connect to {where} ({type(exc).__name__}: {exc})",
                                "is the LLM server up and listening there?") from exc

    async def _send(self, writer: asyncio.StreamWriter, path: str, body: dict[str, Any]) -> None:
        payload = json.dumps(body).encode()
        head = [f"POST {self._prefix}{path} HTTP/1.1", f"Host: {self._host}:{self._port}",
                "Content-Type: application/json", "Accept: text/event-stream",
                f"Content-Length: {len(payload)}", "Connection: close"]
        if self._key.reveal():
            head.append(f"Authorization: Bearer {self._key.reveal()}")
        try:
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
            await writer.drain()
        except ConnectionError as exc:
            raise EndpointError(f"{self.settings.base_url.rstrip('/')}{path} closed the "
                                f"connection while the request was sent ({exc})",
                                "see the server's log") from exc

    async def _line(self, reader: asyncio.StreamReader, where: str, guard: _StallGuard,
                    what: str) -> bytes:
        guard.what = what
        try:
            line = await reader.readline()
            guard.touch()
            return line
        except (ConnectionError, asyncio.LimitOverrunError, ValueError) as exc:
            raise EndpointError(f"{where} broke the stream while {what} ({exc})",
                                "see the server's log") from exc

    async def _read_head(self, reader: asyncio.StreamReader, where: str, guard: _StallGuard
                         ) -> tuple[bool, int | None]:
        """Status and headers; returns the body's framing (chunked, content length)."""
        status_line = (await self._line(reader, where, guard, "waiting for the response")).decode(
            "latin-1").strip()
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            raise EndpointError(f"{where} sent no HTTP response ({status_line[:80]!r})",
                                "is this an OpenAI-compatible server?")
        status = int(parts[1])
        chunked, length = False, None
        while True:
            line = (await self._line(reader, where, guard, "reading headers")).decode(
                "latin-1").strip()
            if not line:
                break
            name, _, value = line.partition(":")
            if name.lower() == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
            if name.lower() == "content-length" and value.strip().isdigit():
                length = int(value.strip())
        if status != 200:
            raw = await self._body_text(reader, where, guard, (chunked, length))
            hint = {429: "the server is rate limiting: lower the concurrency or the target QPS",
                    401: f"set the API key in ${self.settings.api_key_env}",
                    404: "check the URL and that the server offers this endpoint and model"
                    }.get(status, "see the server's log")
            raise EndpointError(f"{where} answered HTTP {status}: {raw[:200]}", hint)
        return chunked, length

    async def _body_text(self, reader: asyncio.StreamReader, where: str, guard: _StallGuard,
                         framing: tuple[bool, int | None]) -> str:
        chunks: list[bytes] = []
        async for piece in self._body(reader, where, guard, framing):
            chunks.append(piece)
            if sum(map(len, chunks)) > 4096:
                break
        return b"".join(chunks).decode("utf-8", "replace").strip()

    async def _body(self, reader: asyncio.StreamReader, where: str, guard: _StallGuard,
                    framing: tuple[bool, int | None]) -> AsyncIterator[bytes]:
        """The response body's bytes as they arrive (chunked, sized, or up to close)."""
        chunked, left = framing
        if chunked:
            while True:
                size_line = (await self._line(reader, where, guard, "streaming")).strip()
                if not size_line:
                    return  # closed without the terminating chunk: the caller decides
                try:
                    size = int(size_line.split(b";")[0], 16)
                except ValueError as exc:
                    raise EndpointError(f"{where} sent a malformed chunk header "
                                        f"{size_line[:40]!r}", "see the server's log") from exc
                if size == 0:
                    return
                guard.what = "reading a chunk"
                try:
                    data = await reader.readexactly(size + 2)
                except asyncio.IncompleteReadError:
                    return
                except ConnectionError as exc:
                    raise EndpointError(f"{where} broke the stream while reading a chunk "
                                        f"({exc})", "see the server's log") from exc
                guard.touch()
                yield data[:-2]
        else:
            while left is None or left > 0:
                line = await self._line(reader, where, guard, "streaming")
                if not line:
                    return
                if left is not None:
                    left -= len(line)
                yield line

    async def _events(self, reader: asyncio.StreamReader, where: str, guard: _StallGuard,
                      framing: tuple[bool, int | None], count: Callable[[], int]
                      ) -> AsyncIterator[dict[str, Any]]:
        """The JSON objects of ``data:`` events up to ``[DONE]``, or up to the end of the body
        after an event with a ``finish_reason`` (``transformers serve`` sends no ``[DONE]``)."""
        buffer = b""
        finished = False
        async for piece in self._body(reader, where, guard, framing):
            buffer += piece
            while b"\n\n" in buffer:
                block, buffer = buffer.split(b"\n\n", 1)
                for line in block.decode("utf-8", "replace").splitlines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    try:
                        event = json.loads(data)
                    except json.JSONDecodeError as exc:
                        raise EndpointError(f"{where} sent a malformed stream event after "
                                            f"{count()} tokens: {data[:80]!r}",
                                            "is this an OpenAI-compatible server?") from exc
                    if isinstance(event, dict) and "error" in event:
                        raise EndpointError(f"{where} reported an error mid-stream: "
                                            f"{str(event['error'])[:200]}", "see the server's log")
                    if not isinstance(event, dict):
                        raise EndpointError(f"{where} sent a stream event that is not an object:"
                                            f" {data[:80]!r}", "is this an OpenAI server?")
                    finished = any(isinstance(c, dict) and c.get("finish_reason")
                                   for c in event.get("choices") or [])
                    yield event
        if finished:
            return
        raise EndpointError(f"{where} closed the connection after {count()} tokens, before "
                            "[DONE]", "the server dropped the request; see its log")


class _StallGuard:
    """Cancels the request's task when nothing has arrived for ``stall_s`` (``expired`` then
    says so). One timer per ``stall_s``, re-armed lazily from the time of the last read: a
    timeout around every read (``asyncio.wait_for``: a task and a timer each) cost as much
    CPU as the rest of the client at a thousand streams."""

    __slots__ = ("_loop", "_task", "_stall_s", "_last", "_handle", "_fired", "what")

    def __init__(self, stall_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._stall_s = stall_s
        self._last = self._loop.time()
        self._fired = False
        self.what = "connecting"  # what the request was waiting for (in the message)
        self._handle = self._loop.call_at(self._last + stall_s, self._check)

    def touch(self) -> None:
        self._last = self._loop.time()

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


def _tokens_of(choice: dict[str, Any], chat: bool) -> tuple[list[int], str]:
    if chat:
        text = (choice.get("delta") or {}).get("content") or ""
    else:
        text = choice.get("text") or ""
    ids = choice.get("token_ids")
    if ids is None:
        logprobs = choice.get("logprobs") or {}
        tokens = logprobs.get("tokens") or [c.get("token", "") for c in
                                            logprobs.get("content") or []]
        ids = [int(t.split(":", 1)[1]) for t in tokens if str(t).startswith("token_id:")]
    return [int(i) for i in ids], text


async def _maybe_await(value: Awaitable[None] | None) -> None:
    if value is not None and hasattr(value, "__await__"):
        await value
