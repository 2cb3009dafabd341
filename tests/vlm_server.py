"""A scripted OpenAI-compatible chat server for the qwen3-vl tests (asyncio, its own thread,
port 0), which both mlharness and the official endpoints client talk to.

- ``GET /v1/models``: the one model it serves (``models``, to test the discovery).
- ``POST /v1/chat/completions``: reads the request (image content parts and all, kept in
  ``seen``), answers ``answer(body)`` (the tests' deterministic answer to that sample); streamed
  as Server-Sent Events when ``"stream": true`` (a token about every 4 characters, token ids
  when ``return_token_ids``, usage in the last chunk when ``stream_options.include_usage``),
  otherwise one JSON completion with ``usage``.
- HTTP/1.1 keep-alive (the endpoints client pools its connections), ``Connection: close``
  honoured.
- Timing: ``service_s`` per request once it holds one of ``slots`` (a FIFO queue beyond them:
  a server with a capacity of ``slots / service_s`` requests per second), ``gap_s`` between
  streamed tokens.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Self

Answer = Callable[[dict[str, Any]], str]
FIRST_ID = 1000


def tokens(text: str) -> list[str]:
    """The server's tokens of ``text``: pieces of up to 4 characters."""
    return [text[i:i + 4] for i in range(0, len(text), 4)] or [""]


@dataclass
class VlmServer:
    answer: Answer
    models: list[str] = field(default_factory=lambda: ["Qwen/Qwen3-VL-235B-A22B-Instruct"])
    service_s: float = 0.0
    slots: int = 1_000_000
    gap_s: float = 0.0
    seen: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    peak: int = 0
    _active: int = 0

    def __enter__(self) -> Self:
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._slots = asyncio.Semaphore(self.slots)
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=4096,
                                     limit=64 * 1024 * 1024))
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="vlm-scripted-server", daemon=True)
        self._thread.start()
        assert ready.wait(10)
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
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        line = await reader.readline()
        if not line:
            return False
        method, path = line.decode().split()[:2]
        headers = {}
        while (text := (await reader.readline()).decode().strip()):
            name, _, value = text.partition(":")
            headers[name.strip().lower()] = value.strip()
        raw = await reader.readexactly(int(headers.get("content-length", 0)))
        keep = headers.get("connection", "").lower() != "close"
        self.paths.append(f"{method} {path}")
        if method == "GET" and path.rstrip("/") == "/v1/models":
            data = [{"id": m, "object": "model", "owned_by": "tests"} for m in self.models]
            self._json(writer, 200, {"object": "list", "data": data}, keep)
        elif method == "POST" and path == "/v1/chat/completions":
            body = json.loads(raw)
            self.seen.append(body)
            self._active += 1
            self.peak = max(self.peak, self._active)
            try:
                async with self._slots:
                    await self._complete(writer, body, keep)
            finally:
                self._active -= 1
        else:
            self._json(writer, 404, {"error": {"message": f"no {method} {path}"}}, keep)
        await writer.drain()
        return keep

    @staticmethod
    def _json(writer: asyncio.StreamWriter, status: int, obj: Any, keep: bool) -> None:
        data = json.dumps(obj).encode()
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\nConnection: {'keep-alive' if keep else 'close'}"
                     "\r\n\r\n".encode() + data)

    async def _complete(self, writer: asyncio.StreamWriter, body: dict[str, Any],
                        keep: bool) -> None:
        text = self.answer(body)
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        pieces = tokens(text)[:limit] if limit else tokens(text)
        ids = [FIRST_ID + i for i in range(len(pieces))]
        usage = {"prompt_tokens": 100, "completion_tokens": len(pieces),
                 "total_tokens": 100 + len(pieces)}
        finish = "length" if limit and len(tokens(text)) > limit else "stop"
        if self.service_s:
            await asyncio.sleep(self.service_s)
        if not body.get("stream"):
            self._json(writer, 200, {
                "id": "cmpl-1", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model"), "usage": usage,
                "choices": [{"index": 0, "finish_reason": finish,
                             "message": {"role": "assistant", "content": "".join(pieces)}}]},
                keep)
            return
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\nConnection: "
                     + (b"keep-alive" if keep else b"close") + b"\r\n\r\n")
        for i, (piece, token) in enumerate(zip(pieces, ids)):
            if i and self.gap_s:
                await asyncio.sleep(self.gap_s)
            choice: dict[str, Any] = {"index": 0, "delta": {"content": piece},
                                      "finish_reason": None}
            if body.get("return_token_ids"):
                choice["token_ids"] = [token]
            self._chunk(writer, {"object": "chat.completion.chunk", "choices": [choice]})
            await writer.drain()
        self._chunk(writer, {"object": "chat.completion.chunk",
                             "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            self._chunk(writer, {"object": "chat.completion.chunk", "choices": [],
                                 "usage": usage})
        self._raw(writer, b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")

    def _chunk(self, writer: asyncio.StreamWriter, obj: Any) -> None:
        self._raw(writer, f"data: {json.dumps(obj)}\n\n".encode())

    @staticmethod
    def _raw(writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
