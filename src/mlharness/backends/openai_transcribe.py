"""The openai backend's speech-to-text client: one clip to an OpenAI-compatible
``/v1/audio/transcriptions`` (vLLM serves Whisper this way), streamed, on the backend's asyncio
loop (standard library only).

The request is a multipart form: the clip's file as it is on disk (the server decodes it as the
reference's QSL does, ``librosa.load(sr=16000)``), the served model, ``language=en`` (vLLM then
builds the reference's decoder prompt ``<|startoftranscript|><|en|><|transcribe|>
<|notimestamps|>``), ``temperature=0`` (greedy), ``max_completion_tokens`` and ``stream=true``
with ``stream_include_usage=true``. The answer is server-sent events: ``choices[0].delta.content``
pieces of text (the first one reports the first token), then a chunk whose ``usage`` gives
``completion_tokens``, LoadGen's ``n_tokens`` (vLLM counts every generated id, the end-of-text
one included, as the reference counts ``token_ids``); a server that reports no count fails the
request: tokens/s cannot be measured without it.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import uuid
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlsplit

from mlharness.prompts import GenerationRequest, TextAnswer

PATH = "/v1/audio/transcriptions"


class TranscriptionError(Exception):
    """A request the server failed or answered out of protocol (one line, the endpoint named)."""


@dataclass(frozen=True)
class Transcriber:
    """Where and how clips are sent."""

    base_url: str
    model: str
    api_key: str | None = None
    connect_timeout_s: float = 10.0
    stall_timeout_s: float = 120.0
    language: str = "en"

    def _form(self, request: GenerationRequest) -> tuple[bytes, str]:
        boundary = f"mlharness-{uuid.uuid4().hex}"
        fields = {"model": self.model, "language": self.language, "response_format": "json",
                  "temperature": f"{request.temperature:g}",
                  "max_completion_tokens": str(request.max_new_tokens), "stream": "true",
                  "stream_include_usage": "true"}
        parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
                 .encode() for k, v in fields.items()]
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                     f'filename="clip.wav"\r\nContent-Type: audio/wav\r\n\r\n'.encode()
                     + (request.audio or b"") + b"\r\n")
        parts.append(f"--{boundary}--\r\n".encode())
        return b"".join(parts), boundary

    async def transcribe(self, request: GenerationRequest,
                         on_first: Callable[[list[int]], None]) -> TextAnswer:
        """The clip's transcript and generated token count; ``on_first([])`` at the first
        piece of text (a transcription stream carries no token ids)."""
        url = urlsplit(self.base_url)
        secure = url.scheme == "https"
        host, port = url.hostname or "127.0.0.1", url.port or (443 if secure else 80)
        body, boundary = self._form(request)
        head = [f"POST {url.path.rstrip('/')}{PATH} HTTP/1.1", f"Host: {url.netloc}",
                f"Content-Type: multipart/form-data; boundary={boundary}",
                f"Content-Length: {len(body)}", "Accept: text/event-stream",
                "Connection: close"]
        if self.api_key:
            head.append(f"Authorization: Bearer {self.api_key}")
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                host, port, ssl=ssl.create_default_context() if secure else None),
                self.connect_timeout_s)
        except (OSError, asyncio.TimeoutError) as exc:
            raise TranscriptionError(f"{self.base_url}: cannot connect ({exc or 'timed out'})") \
                from None
        try:
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
            await writer.drain()
            return await self._answer(reader, on_first, request.max_new_tokens)
        except asyncio.TimeoutError:
            raise TranscriptionError(f"{self.base_url}: nothing for {self.stall_timeout_s:g} s")\
                from None
        finally:
            writer.close()

    async def _line(self, reader: asyncio.StreamReader) -> bytes:
        return await asyncio.wait_for(reader.readline(), self.stall_timeout_s)

    async def _answer(self, reader: asyncio.StreamReader, on_first: Callable[[list[int]], None],
                      most: int) -> TextAnswer:
        status = (await self._line(reader)).decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while (line := await self._line(reader)) not in (b"\r\n", b"\n", b""):
            key, _, value = line.decode("latin-1").partition(":")
            headers[key.strip().lower()] = value.strip()
        if len(status) < 2 or status[1] != "200":
            text = (await asyncio.wait_for(reader.read(2000), self.stall_timeout_s)).decode(
                "utf-8", "replace")
            raise TranscriptionError(f"{self.base_url}{PATH}: HTTP {' '.join(status[1:]).strip()}"
                                     f": {' '.join(text.split())[:200]}")
        chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        pieces: list[str] = []
        tokens: int | None = None
        async for event in self._events(reader, chunked):
            if event == "[DONE]":
                break
            data = self._json(event)
            if "error" in data:
                raise TranscriptionError(f"{self.base_url}{PATH}: the server failed the "
                                         f"request: {str(data['error'])[:200]}")
            for choice in data.get("choices") or []:
                content = (choice.get("delta") or {}).get("content") or ""
                if content and not pieces:
                    on_first([])
                if content:
                    pieces.append(content)
            usage = data.get("usage")
            if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                tokens = usage["completion_tokens"]
        if tokens is None:
            raise TranscriptionError(f"{self.base_url}{PATH}: the stream reported no "
                                     "completion_tokens (LoadGen's n_tokens); a vLLM server "
                                     "sends them with stream_include_usage")
        if not 0 <= tokens <= most:
            raise TranscriptionError(f"{self.base_url}{PATH}: {tokens} completion_tokens for a "
                                     f"request of at most {most}")
        return TextAnswer(text="".join(pieces), n_tokens=tokens)

    def _json(self, event: str) -> dict[str, Any]:
        try:
            data = json.loads(event)
        except ValueError:
            raise TranscriptionError(f"{self.base_url}{PATH}: an event is not JSON: "
                                     f"{event[:80]!r}") from None
        if not isinstance(data, dict):
            raise TranscriptionError(f"{self.base_url}{PATH}: an event is not a JSON object")
        return data

    async def _events(self, reader: asyncio.StreamReader, chunked: bool):
        """The ``data:`` payloads of the event stream (chunked or until the connection ends)."""
        buffer = b""
        while True:
            if chunked:
                size = int((await self._line(reader)).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    break
                block = await asyncio.wait_for(reader.readexactly(size + 2), self.stall_timeout_s)
                block = block[:-2]
            else:
                block = await asyncio.wait_for(reader.read(65536), self.stall_timeout_s)
                if not block:
                    break
            buffer += block
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                text = line.decode("utf-8").strip()
                if text.startswith("data:"):
                    yield text[5:].strip()
        text = buffer.decode("utf-8").strip()
        if text.startswith("data:"):
            yield text[5:].strip()
