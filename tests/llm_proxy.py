"""A logging proxy between mlharness and a real OpenAI-compatible server (tests and trials).

It listens on a free port of 127.0.0.1, forwards each HTTP/1.1 request to the server as it came
(on a connection of its own that the server closes after the answer: ``Connection: close``),
relays the answer byte for byte as it arrives (its head without that ``Connection`` line: the
client's connection is kept for its next request, as the server would keep it, unless the
client asked otherwise or the answer has no framing but the close), and records what really went over the wire: the
request's path and JSON body, when it arrived, and every SSE ``data:`` event of the answer with
the time it passed the proxy (``time.perf_counter``; the proxy runs in the test's process). That
is the truth the client's numbers are held to: what was sent (token ids, text or chat messages),
the first content's time (TTFT as the server delivered it), the time between contents, the text.

Run alone, ``python tests/llm_proxy.py UPSTREAM_URL PORT LOG.jsonl`` proxies until killed and
appends one JSON line per exchange to the log.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Self
from urllib.parse import urlsplit


@dataclass
class Exchange:
    """One request through the proxy and its answer's events."""

    path: str
    body: dict[str, Any]
    received: float  # when the request's body was complete
    status: int = 0
    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    ended: float = 0.0

    def contents(self) -> list[tuple[float, str]]:
        """Each event that carried text (chat ``delta.content`` or completion ``text``)."""
        out = []
        for at, event in self.events:
            for choice in event.get("choices") or []:
                text = (choice.get("delta") or {}).get("content") or choice.get("text")
                if text:
                    out.append((at, text))
        return out

    @property
    def text(self) -> str:
        return "".join(t for _, t in self.contents())

    @property
    def ttft_s(self) -> float:
        return self.contents()[0][0] - self.received

    @property
    def last_s(self) -> float:
        """From the request to its last content."""
        return self.contents()[-1][0] - self.received


class LoggingProxy:
    """``with LoggingProxy("http://127.0.0.1:8000") as proxy: ... proxy.url ... proxy.seen``."""

    def __init__(self, upstream: str, port: int = 0, log: str | None = None) -> None:
        parts = urlsplit(upstream)
        self.host, self.upstream_port = parts.hostname or "127.0.0.1", parts.port or 80
        self.port = port
        self.log = log
        self.seen: list[Exchange] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Self:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._server = loop.run_until_complete(
                asyncio.start_server(self._handle, "127.0.0.1", self.port))
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="llm-proxy", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        loop = self._loop
        if loop is None:
            return

        async def close() -> None:
            if self._server is not None:
                self._server.close()

        asyncio.run_coroutine_threadsafe(close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def exchanges(self, path: str | None = None) -> list[Exchange]:
        with self._lock:
            return [e for e in self.seen if path is None or e.path.endswith(path)]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._relay(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """One exchange; whether the client's connection may carry another."""
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        keep = not any(line.lower().startswith("connection:") and "close" in line.lower()
                       for line in lines)
        head = ("\r\n".join([line for line in lines[:-2]
                              if not line.lower().startswith("connection:")]
                             + ["Connection: close", "", ""])).encode("latin-1")
        length = next((int(line.split(":", 1)[1]) for line in lines
                       if line.lower().startswith("content-length:")), 0)
        body = await reader.readexactly(length) if length else b""
        exchange = Exchange(lines[0].split(" ")[1], _json(body), time.perf_counter())
        with self._lock:
            self.seen.append(exchange)
        up_reader, up_writer = await asyncio.open_connection(self.host, self.upstream_port)
        up_writer.write(head + body)
        await up_writer.drain()
        raw = b""  # the answer's bytes not parsed yet
        body_bytes = b""  # the body, de-chunked, not yet split into lines
        chunked: bool | None = None
        try:
            while True:
                data = await up_reader.read(65536)
                if not data:
                    break
                now = time.perf_counter()
                raw += data
                if chunked is None:
                    if b"\r\n\r\n" not in raw:
                        continue
                    answer_head, raw = raw.split(b"\r\n\r\n", 1)
                    text = answer_head.decode("latin-1").lower()
                    exchange.status = int(text.split(" ")[1])
                    chunked = "transfer-encoding: chunked" in text
                    keep = keep and (chunked or "content-length:" in text)
                    kept = [line for line in answer_head.split(b"\r\n")
                            if not line.lower().startswith(b"connection:")]
                    data = b"\r\n".join(kept + ([] if keep else [b"Connection: close"])
                                         ) + b"\r\n\r\n" + raw
                writer.write(data)
                await writer.drain()
                if chunked:
                    payload, raw = _dechunk(raw)
                else:
                    payload, raw = raw, b""
                body_bytes = _events(exchange, body_bytes + payload, now)
        finally:
            exchange.ended = time.perf_counter()
            up_writer.close()
            if self.log:
                with open(self.log, "a") as out:
                    out.write(json.dumps(asdict(exchange)) + "\n")
        return keep and chunked is not None  # no answer at all: the client's is closed too


def _dechunk(raw: bytes) -> tuple[bytes, bytes]:
    """The payload of the whole chunks at the start of ``raw``, and what is left of it."""
    out = b""
    while b"\r\n" in raw:
        size_line, rest = raw.split(b"\r\n", 1)
        size = int(size_line.split(b";")[0].strip() or b"0", 16)
        if len(rest) < size + 2:
            break
        out += rest[:size]
        raw = rest[size + 2:]
        if size == 0:
            break
    return out, raw


def _events(exchange: Exchange, body: bytes, now: float) -> bytes:
    """Records the whole ``data:`` lines of ``body``; returns the unfinished rest."""
    while b"\n" in body:
        line, body = body.split(b"\n", 1)
        line = line.strip()
        if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
            event = _json(line[5:])
            if event:
                exchange.events.append((now, event))
    return body


def _json(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


if __name__ == "__main__":
    with LoggingProxy(sys.argv[1], int(sys.argv[2]), sys.argv[3]) as proxy:
        print(f"proxying {proxy.url} -> {sys.argv[1]}", flush=True)
        threading.Event().wait()
