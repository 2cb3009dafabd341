"""A scripted OpenAI-compatible streaming server for tests (asyncio, its own thread, port 0).

``POST /v1/completions`` and ``/v1/chat/completions`` with ``"stream": true`` answer with
Server-Sent Events in chunked transfer encoding, as vLLM does: the first token after
``Script.ttft_s``, then one token every ``gap_s`` up to ``n_tokens`` (or ``max_tokens``), a
finishing chunk and ``data: [DONE]``. Token ids are ``first_id + i``; each chunk's choice carries
``token_ids`` when the request asked ``"return_token_ids": true``, else logprob tokens
``"token_id:N"`` when it asked ``"return_tokens_as_token_ids": true`` (vLLM's two ways); with
``Script.token_ids = False`` it streams text only, as servers without either do. One request a
connection (its answers say ``Connection: close``, so a pooling client opens a new one), or,
with ``keep_alive``, as many as the client sends on it, as vLLM serves them (``close_after``
answers, then the next request is read and the connection closed without a byte: a server's
idle timeout that fired as the request came); ``handshake_s``: a connection's set-up time, paid
by a request that comes sooner after the connection. ``peak`` is the most requests it held open
at once, ``connections`` the connections it accepted.
Faults after ``fault_after`` tokens: ``drop`` (close the socket), ``stall`` (send nothing more),
``malformed`` (a chunk that is not JSON), ``error_event`` (a ``{"error": ...}`` event in the 200
stream); ``429`` / ``500`` answer at once with that status. Every error text names the request's
``Authorization`` header (a server that echoes it: the key must go nowhere from there).

A hostile server: ``chunks`` streams exactly those ``token_ids`` values, one a chunk, whatever
they are (strings, floats, too many) and whatever ``max_tokens`` asked; ``ignore_max_tokens``
streams ``n_tokens`` ids beyond ``max_tokens``; ``act`` (a coroutine function given the
writer) answers with whatever bytes it writes, at whatever pace (see ``hostile``).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Self


@dataclass
class Script:
    ttft_s: float = 0.05
    gap_s: float = 0.01
    n_tokens: int = 8
    first_id: int = 100
    fault: str | None = None  # drop, stall, malformed, 429, 500
    fault_after: int = 2
    token_ids: bool = True  # False: text only, whatever the request asked
    done: bool = True  # False: no ``data: [DONE]`` after the finishing chunk (transformers serve)
    chunks: list[Any] | None = None  # each chunk's raw token_ids value, sent as it is
    ignore_max_tokens: bool = False
    act: Callable[[asyncio.StreamWriter], Awaitable[None]] | None = None
    keep_alive: bool = False  # serve requests on a connection until the client closes it
    close_after: int = 0  # keep_alive: answers on a connection before it is dropped (0: never)
    #: a keep-alive answer's head says this anyway (a server that closes after it)
    connection_close: bool = False
    #: a new connection's set-up (a network's round trips, a TLS handshake): a request on it
    #: is read no sooner than this long after the connection came
    handshake_s: float = 0.0


@dataclass
class Seen:
    """What one request carried, when it arrived and when each token went out
    (``time.perf_counter``: the server runs in the test's process, so the clocks compare)."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    received: float = 0.0
    token_times: list[float] = field(default_factory=list)

    def ttft_s(self) -> float:
        return self.token_times[0] - self.received

    def tpot_s(self) -> float:
        return (self.token_times[-1] - self.token_times[0]) / (len(self.token_times) - 1)


@dataclass
class ScriptedServer:
    script: Script = field(default_factory=Script)
    seen: list[Seen] = field(default_factory=list)
    active: int = 0  # requests open now
    peak: int = 0  # most open at once
    connections: int = 0  # connections accepted

    def __enter__(self) -> Self:
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=4096))
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="llm-scripted-server", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        async def close() -> None:
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        answered = 0
        loop = asyncio.get_running_loop()
        set_up = loop.time() + self.script.handshake_s
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return  # the client closed it
                if (wait := set_up - loop.time()) > 0:
                    await asyncio.sleep(wait)
                if self.script.close_after and answered >= self.script.close_after:
                    return  # dropped as the request came: nothing of an answer
                self.active += 1
                self.peak = max(self.peak, self.active)
                try:
                    await self._serve(line, reader, writer)
                finally:
                    self.active -= 1
                answered += 1
                if not self.script.keep_alive or self.script.connection_close:
                    return
        except (ConnectionError, asyncio.CancelledError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    @property
    def _close_header(self) -> str:
        return ("Connection: close\r\n" if not self.script.keep_alive or self.script.connection_close
                else "")

    async def _serve(self, line: bytes, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        request = line.decode().split()
        headers = {}
        while (line := (await reader.readline()).decode().strip()):
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        body = json.loads(await reader.readexactly(int(headers.get("content-length", 0))))
        path = request[1]
        seen = Seen(path, headers, body, received=time.perf_counter())
        self.seen.append(seen)
        s = self.script
        if s.act is not None:
            await s.act(writer)
            return
        auth = headers.get("authorization", "no Authorization header")
        if s.fault in ("429", "500") or path not in ("/v1/completions", "/v1/chat/completions"):
            status = int(s.fault) if s.fault in ("429", "500") else 404
            text = json.dumps({"error": {"message": f"scripted {status}: you sent {auth}"}}
                              ).encode()
            writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                         f"{self._close_header}"
                         f"Content-Length: {len(text)}\r\n\r\n".encode() + text)
            await writer.drain()
            return
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n" + self._close_header.encode() + b"\r\n")
        chat = path.endswith("chat/completions")
        n = min(s.n_tokens, int(body.get("max_tokens") or s.n_tokens))
        if s.ignore_max_tokens:
            n = s.n_tokens
        await asyncio.sleep(s.ttft_s)
        if s.chunks is not None:
            for raw in s.chunks:
                choice = {"index": 0, "text": " t", "token_ids": raw, "finish_reason": None}
                self._chunk(writer, f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
            self._chunk(writer, _event(body, chat, None, "stop"))
            self._chunk(writer, b"data: [DONE]\n\n")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return
        for i in range(n):
            if i == s.fault_after and s.fault == "error_event":
                error = {"error": {"message": f"scripted mid-stream error: you sent {auth}",
                                   "code": 400}}
                self._chunk(writer, f"data: {json.dumps(error)}\n\n".encode())
                self._chunk(writer, b"data: [DONE]\n\n")
                writer.write(b"0\r\n\r\n")
                await writer.drain()
                return
            if i == s.fault_after and s.fault in ("drop", "stall", "malformed"):
                if s.fault == "drop":
                    writer.transport.abort()
                    return
                if s.fault == "stall":
                    await asyncio.sleep(3600)
                self._chunk(writer, b'data: {"choices": [{"text": "oops"\n\n')
                await writer.drain()
                await asyncio.sleep(3600)
            if i:
                await asyncio.sleep(s.gap_s)
            self._chunk(writer, _event(body, chat, s.first_id + i, None, s.token_ids))
            await writer.drain()
            seen.token_times.append(time.perf_counter())
        last = _event(body, chat, None, "length" if n == body.get("max_tokens") else "stop",
                      s.token_ids) + (b"data: [DONE]\n\n" if s.done else b"")
        # the end in one write, as one chunk with its terminator: a keep-alive client then has
        # its connection back as it reads the end (else it may read the terminator later)
        writer.write(f"{len(last):x}\r\n".encode() + last + b"\r\n0\r\n\r\n")
        await writer.drain()

    @staticmethod
    def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


def _event(body: dict[str, Any], chat: bool, token: int | None, finish: str | None,
           with_ids: bool = True) -> bytes:
    text = f" t{token}" if token is not None else ""
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
    if chat:
        choice["delta"] = {"content": text} if text else {}
    else:
        choice["text"] = text
    ids = [token] if token is not None else []
    if not with_ids:
        pass
    elif body.get("return_token_ids"):
        choice["token_ids"] = ids
    elif body.get("return_tokens_as_token_ids"):
        choice["logprobs"] = {"tokens": [f"token_id:{i}" for i in ids]}
    obj = "chat.completion.chunk" if chat else "text_completion"
    return f"data: {json.dumps({'object': obj, 'choices': [choice]})}\n\n".encode()


# ---- hostile answers for ``Script.act`` ------------------------------------------------------------

OK_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n")
EVENT = b'data: {"choices": [{"text": " t", "token_ids": [5], "finish_reason": null}]}\n\n'


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def silent(writer: asyncio.StreamWriter) -> None:
    """Accepts the request and never answers."""
    await asyncio.sleep(3600)


def drip(every_s: float, head: bytes = OK_HEAD) -> Callable[[asyncio.StreamWriter], Awaitable[None]]:
    """The headers at once, then a valid event a byte every ``every_s``."""
    async def act(writer: asyncio.StreamWriter) -> None:
        writer.write(head)
        for byte in chunk(EVENT * 100):
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(every_s)
    return act


async def held_429(writer: asyncio.StreamWriter) -> None:
    """HTTP 429 and the start of its body, then the connection held open."""
    writer.write(b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 1000\r\n\r\n"
                 b'{"error": {"message": "slow down"')
    await writer.drain()
    await asyncio.sleep(3600)


def endless(line: bytes) -> Callable[[asyncio.StreamWriter], Awaitable[None]]:
    """A 200 whose body repeats ``line`` for ever, as fast as it is read."""
    async def act(writer: asyncio.StreamWriter) -> None:
        writer.write(OK_HEAD)
        block = chunk(line * max(1, 65536 // len(line)))
        while True:
            writer.write(block)
            await writer.drain()
    return act


def huge_line(megabytes: int, end: bool = True) -> Callable[[asyncio.StreamWriter], Awaitable[None]]:
    """A 200 whose first line of body is ``megabytes`` MB long (written 64 KiB at a time)."""
    async def act(writer: asyncio.StreamWriter) -> None:
        writer.write(OK_HEAD + chunk(b"data: {\"x\": \""))
        piece = chunk(b"x" * 65536)
        for _ in range(megabytes * 16):
            writer.write(piece)
            await writer.drain()
        if end:
            writer.write(chunk(b'"}\n\n') + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()
    return act


def raw(data: bytes) -> Callable[[asyncio.StreamWriter], Awaitable[None]]:
    """Exactly ``data``, then the connection closed."""
    async def act(writer: asyncio.StreamWriter) -> None:
        writer.write(data)
        await writer.drain()
    return act


async def endless_headers(writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\n")
    while True:
        writer.write(b"X-Filler: " + b"y" * 1000 + b"\r\n")
        await writer.drain()
