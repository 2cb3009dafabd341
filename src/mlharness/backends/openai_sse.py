"""One streamed HTTP/1.1 response of an OpenAI-compatible server, read as an asyncio protocol:
status and headers, the body's framing (chunked, sized, or up to close), the ``data:`` lines of
its Server-Sent Events, and from each event's first choice the token ids, text and finish reason.

All of it happens in ``data_received``, with bytes operations, as the bytes arrive: no coroutine
wakes per token (a ``StreamReader`` costs a task step per read, nested async generators a frame
each). The request's coroutine waits on ``done`` alone; the first token goes to ``on_first`` at
once, from the read that brought it. The stream ends at ``data: [DONE]``, or at the end of the
body after an event with a ``finish_reason`` (``transformers serve`` sends no ``[DONE]``).
Each failure is an :class:`EndpointError` naming the endpoint, set on ``done``.

An answer that breaks its request fails at the event that breaks it (:class:`Expected`): more
tokens than ``max_tokens`` (more text chunks, for a server that streams no ids), a token id
that is not an integer or lies outside the vocabulary (int32 when it is unknown), a token after
the EOS token.

What a response may cost is bounded (:class:`Bounds`): the headers, each line of the body (an
SSE event), a chunk header, the events that carry no token; bytes are scanned once (a line
that comes in many reads is joined once, at its end), so a 40 MB line costs 40 MB of work, not
its square. Progress, for the stall guard, is a whole header block or a whole line, not a byte:
a server that drips a byte a second stalls as one that sends nothing. A refusal (a status other
than 200) gets ``Bounds.error_body_s`` to send its body, then is reported with what came.

Given ``on_release`` (a keep-alive connection's owner: :mod:`~mlharness.backends.openai_pool`),
a response tells it once, at its end, whether its connection may carry another request: only
after a 200 on HTTP/1.1 without ``Connection: close`` whose body's framing ended exactly
(Content-Length, or the chunked terminator and its trailer: after ``[DONE]`` the rest is read,
blank lines only, for at most ``Bounds.error_body_s``), with no byte beyond it. Anything else
(a refusal, an error, a cut, a bound broken, bytes after the end) closes it.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from mlharness.errors import RunFailed
from mlharness.prompts import INT32_LIMIT, bad_token_id
from mlharness.redact import scrub

_HEAD, _BODY, _ERROR_BODY = 0, 1, 2
_DRAIN, _OVER = 3, 4  # after [DONE]: the framing's end still to read; released
_ERROR_TEXT_MAX = 4096  # bytes of a refusal's body kept for its message
_CHUNK_HEADER_MAX = 1024  # bytes of a chunk's size line (hex size and extensions)
_decode = json.JSONDecoder().raw_decode  # json.loads without its per-call checks (a third)


class EndpointError(RunFailed):
    """The LLM server failed a request (refused, HTTP error, stalled, dropped, malformed);
    ``status`` is the HTTP status of a refusal (0: none), ``said`` the server's words."""

    def __init__(self, message: str, hint: str = "", status: int = 0, said: str = "") -> None:
        super().__init__(message, hint)
        self.status, self.said = status, said


class Touched(Protocol):
    """What the stream tells its stall guard: that it progressed (a whole header block or
    line), what it now waits for, and the bytes that came since it last progressed."""

    what: str
    trickled: int

    def touch(self) -> None: ...


@dataclass(frozen=True)
class Bounds:
    """What one response may cost: ``max_header_bytes`` of status and headers,
    ``max_event_bytes`` a line of the body (an SSE event), at most ``max_empty_events`` events
    without a token (or ``max_tokens`` of them, if more), and ``error_body_s`` seconds for a
    refusal's body."""

    max_event_bytes: int = 1 << 20
    max_header_bytes: int = 64 << 10
    max_empty_events: int = 64
    error_body_s: float = 2.0


#: the first token's ids (or text, when the server streams no ids) and the time it came
OnFirst = Callable[[list[int], str, float], None]
#: told once at the response's end whether its connection may carry another request
OnRelease = Callable[[bool], None]


@dataclass(frozen=True)
class Expected:
    """What the request allows its answer: at most ``max_tokens`` tokens, ids below
    ``id_limit`` (the vocabulary size when ``vocabulary``, else int32's limit), nothing after
    the ``eos_id`` token (when known)."""

    max_tokens: int
    id_limit: int = INT32_LIMIT
    vocabulary: bool = False
    eos_id: int | None = None


class _Broken(Exception):
    """The answer broke its request or the stream's format (the message says how)."""


class SseResponse(asyncio.Protocol):
    """Reads one response; ``done`` resolves at its end (or fails), ``ids``, ``text`` and
    ``finish`` hold what it streamed, ``first_at`` when its first token came."""

    def __init__(self, where: str, chat: bool, guard: Touched, on_first: OnFirst,
                 api_key_env: str | None = None, expected: Expected | None = None,
                 bounds: Bounds | None = None, on_release: OnRelease | None = None) -> None:
        self.where, self.chat, self.guard = where, chat, guard
        self._on_release = on_release
        self.received = 0  # bytes of the response that came (0: nothing, a stale connection)
        self.lost = False  # the connection closed under it
        self._keep = False  # HTTP/1.1 200 without Connection: close: reusable at a clean end
        self._trailer = False  # the chunked terminator came: its trailer's end still to come
        self._ended = False  # the body's framing ended (or the connection did)
        self._drain_timer: asyncio.TimerHandle | None = None
        self._key_env = api_key_env
        self.expected = expected or Expected(max_tokens=INT32_LIMIT)
        self.bounds = bounds or Bounds()
        self._chunks = 0  # events that carried tokens (ids or text)
        self._empty = 0  # events that carried none
        self._after_eos = False  # the last id so far was the EOS token
        #: bytes copied to join pieces of a line or a head (linear: each byte at most once)
        self.copied = 0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self.ids: list[int] = []
        self.text: list[str] = []
        self.finish: str | None = None
        #: the last ``usage.completion_tokens`` an event reported (a transcription server
        #: counts its tokens so: its stream carries text without ids); None: none did
        self.completion_tokens: int | None = None
        self.first_at: float | None = None
        self._on_first = on_first
        self._state = _HEAD
        self._status = 0
        self._hint = ""
        self._chunked = False
        self._left: int | None = None  # body bytes still to come (Content-Length)
        self._chunk_left = 0  # payload bytes of the current chunk still to come
        self._raw = b""  # bytes not parsed yet: the head, a chunk header
        self._pieces: list[bytes] = []  # the start of an SSE line, as it came
        self._pieces_len = 0
        self._finished = False  # the last event had a finish_reason
        self._error_text = b""
        self._error_timer: asyncio.TimerHandle | None = None

    # -- the transport's calls ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream's: close, write
        if self._state == _HEAD and not self._raw:
            self.guard.what = "waiting for the response"

    def data_received(self, data: bytes) -> None:
        self.guard.trickled += len(data)
        self.received += len(data)
        if self._state == _OVER or (self.done.done() and self._state != _DRAIN):
            if data and self._state != _OVER:
                self._release(False)
            return
        try:
            if self._state == _HEAD:
                data = self._head(data)
                if self._state == _HEAD or self.done.done():
                    return
            if self._chunked:
                self._dechunk(data)
            elif self._left is None:
                self._payload(data)
            else:
                if len(data) > self._left:  # bytes beyond the body: never reused
                    self._keep = False
                    data = data[:self._left]
                self._left -= len(data)
                self._payload(data)
                if self._left == 0:
                    self._end_of_body()
        except EndpointError as exc:
            self._fail(exc)
        except Exception as exc:  # noqa: BLE001 - answered on ``done``, the request's own error
            self._fail(EndpointError(f"{self.where} sent a response this client cannot read "
                                     f"({type(exc).__name__}: {str(exc)[:120]})",
                                     "is this an OpenAI-compatible server?"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.done.done():
            self._release(False)
            return
        try:
            if self._state == _HEAD:
                self._fail(self._head_lost(exc))
            elif exc is not None and self._state == _BODY:
                self._fail(EndpointError(f"{self.where} broke the stream while streaming "
                                         f"({exc})", "see the server's log"))
            else:
                self._end_of_body()
        except Exception as bad:  # noqa: BLE001 - never an "Exception in callback"
            self._fail(EndpointError(f"{self.where} sent a response this client cannot read "
                                     f"({type(bad).__name__}: {str(bad)[:120]})",
                                     "is this an OpenAI-compatible server?"))

    # -- parsing ----------------------------------------------------------------------------

    def _head(self, data: bytes) -> bytes:
        """Status and headers; returns the body's bytes that came with them."""
        seen = len(self._raw)
        raw = self._raw + data if self._raw else data
        self.copied += seen
        end = raw.find(b"\r\n\r\n", max(0, seen - 3))
        if end < 0 or end > self.bounds.max_header_bytes:
            if len(raw) > self.bounds.max_header_bytes:
                self._status_line(raw)  # not HTTP at all: say that first
                raise EndpointError(f"{self.where} sent more than "
                                    f"{_size(self.bounds.max_header_bytes)} of status and "
                                    "headers", "is this an OpenAI-compatible server? (openai "
                                    "backend option max_header_bytes raises the bound)")
            self._raw = raw
            self.guard.what = "reading headers"
            return b""
        self._raw = b""
        self.guard.touch()
        lines = raw[:end].decode("latin-1").split("\r\n")
        self._status = self._status_line(raw)
        self._keep = self._status == 200 and lines[0].startswith("HTTP/1.1 ")
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name, value = name.strip().lower(), value.strip()
            if name == "transfer-encoding" and "chunked" in value.lower():
                self._chunked = True
            elif name == "content-length" and value.isdigit():
                self._left = int(value)
            elif name == "connection" and "close" in value.lower():
                self._keep = False
        self._keep = self._keep and (self._chunked or self._left is not None)
        self.guard.what = "waiting for the first token"
        self._state = _BODY if self._status == 200 else _ERROR_BODY
        if self._state == _ERROR_BODY:  # a refusal is not waited for long (429, connection held)
            self.guard.what = f"reading its HTTP {self._status} answer"
            self._error_timer = asyncio.get_running_loop().call_later(
                self.bounds.error_body_s, self._end_of_body)
        if self._left == 0:
            self._end_of_body()
        return raw[end + 4:]

    def _head_lost(self, exc: Exception | None) -> EndpointError:
        try:
            if self._raw:
                self._status_line(self._raw)
        except EndpointError as bad:
            return bad
        return EndpointError(f"{self.where} closed the connection while {self.guard.what}"
                             + (f" ({exc})" if exc else ""), "see the server's log")

    def _status_line(self, raw: bytes) -> int:
        line = raw[:200].split(b"\n", 1)[0].decode("latin-1").strip()
        parts = line.split(" ", 2)
        if (len(parts) < 2 or not parts[0].startswith("HTTP/") or len(parts[1]) != 3
                or not (parts[1].isascii() and parts[1].isdigit())):
            raise EndpointError(f"{self.where} sent no HTTP response ({line[:80]!r})",
                                "is this an OpenAI-compatible server?")
        return int(parts[1])

    def _dechunk(self, data: bytes) -> None:
        raw = self._raw + data if self._raw else data
        pos, size = 0, len(raw)
        while True:
            if self._chunk_left:
                piece = raw[pos:pos + self._chunk_left]
                self.copied += len(piece)
                pos += len(piece)
                self._chunk_left -= len(piece)
                self._payload(piece)
                if self._chunk_left or self._stopped():
                    break
            end = raw.find(b"\n", pos)
            if end < 0:
                if size - pos > _CHUNK_HEADER_MAX:
                    raise EndpointError(f"{self.where} sent a chunk header of more than "
                                        f"{_CHUNK_HEADER_MAX} bytes", "see the server's log")
                break
            line = raw[pos:end].strip()  # a chunk's size, or the CRLF after its payload
            pos = end + 1
            if self._trailer:  # after the terminator: trailer fields up to a blank line
                if not line:
                    if pos < size:  # bytes beyond the response: never reused
                        self._keep = False
                    self._trailer = False
                    self._end_of_body()
                    return
                continue
            if not line:
                continue
            try:
                self._chunk_left = int(line.split(b";", 1)[0], 16)
            except ValueError:
                raise EndpointError(f"{self.where} sent a malformed chunk header "
                                    f"{line[:40]!r}", "see the server's log") from None
            if self._chunk_left == 0:
                if self._keep and self._on_release is not None:
                    self._trailer = True  # reusable: the trailer's blank line ends the body
                    continue
                self._end_of_body()
                return
        self._raw = raw[pos:] if pos < size else b""

    def _payload(self, data: bytes) -> None:
        if self._state == _DRAIN:  # after [DONE]: blank lines only, or no reuse
            if data.strip():
                self._release(False)
            return
        if self._state == _ERROR_BODY:
            self._error_text += data[:_ERROR_TEXT_MAX + 1 - len(self._error_text)]
            if len(self._error_text) > _ERROR_TEXT_MAX:
                self._end_of_body()
            return
        start = 0
        if self._pieces:  # a line begun in earlier reads: its end, or more of it
            end = data.find(b"\n")
            if end < 0:
                self._more_of_a_line(data)
                return
            self._more_of_a_line(data[:end])
            self.copied += end
            line = b"".join(self._pieces)
            self.copied += len(line)
            self._pieces, self._pieces_len = [], 0
            self._line(line, 0, len(line))
            if self.done.done():
                return
            start = end + 1
        limit = self.bounds.max_event_bytes
        while (end := data.find(b"\n", start)) >= 0:
            if end - start > limit:
                self._too_long()
            self._line(data, start, end)
            if self.done.done():
                return
            start = end + 1
        if start < len(data):
            if start:
                self.copied += len(data) - start
            self._more_of_a_line(data[start:] if start else data)

    def _more_of_a_line(self, piece: bytes) -> None:
        self._pieces.append(piece)
        self._pieces_len += len(piece)
        if self._pieces_len > self.bounds.max_event_bytes:
            self._too_long()

    def _too_long(self) -> None:
        raise EndpointError(f"{self.where} sent a line (an event) of more than "
                            f"{_size(self.bounds.max_event_bytes)} after {len(self.ids)} tokens",
                            "is this an OpenAI-compatible server? (openai backend option "
                            "max_event_bytes raises the bound)")

    def _line(self, buf: bytes, start: int, end: int) -> None:
        """One whole line of the body, ``buf[start:end]``: an event (progress) if ``data:``;
        blank lines and comments (``: ping``) are neither."""
        if buf.startswith(b"data:", start):
            self.guard.touch()
            self._event(buf[start + 5:end].strip())

    def _event(self, data: bytes) -> None:
        if data == b"[DONE]":
            self._complete()
            return
        try:
            text = data.decode()
        except UnicodeDecodeError:
            text = data.decode("utf-8", "replace")
        try:
            event, end = _decode(text)
            if end != len(text):
                raise ValueError("more after the object")
        except ValueError:
            raise EndpointError(f"{self.where} sent a malformed stream event after "
                                f"{len(self.ids)} tokens: {_shown(data)!r}",
                                "is this an OpenAI-compatible server?") from None
        if type(event) is not dict:
            raise EndpointError(f"{self.where} sent a stream event that is not an object: "
                                f"{_shown(data)!r}", "is this an OpenAI server?")
        if "error" in event or event.get("object") == "error":
            raise EndpointError(f"{self.where} reported an error mid-stream after "
                                f"{len(self.ids)} tokens: {_server_says(event)}",
                                "see the server's log")
        usage = event.get("usage")
        if type(usage) is dict and type(usage.get("completion_tokens")) is int:
            self.completion_tokens = usage["completion_tokens"]
        choices = event.get("choices")
        if not choices:
            self._finished = False
            self._no_token()
            return
        if type(choices) is not list:
            raise EndpointError(f"{self.where} sent choices that are not a list: "
                                f"{_shown(data)!r}", "is this an OpenAI-compatible server?")
        choice = choices[0] if type(choices[0]) is dict else {}
        finish = choice.get("finish_reason")
        self._finished = bool(finish) if len(choices) == 1 else any(
            type(c) is dict and c.get("finish_reason") for c in choices)
        if finish:
            self.finish = str(finish)[:40]
        try:
            ids, said = tokens_of(choice, self.chat)
            if ids or said:
                self._check(ids)
        except _Broken as exc:
            raise EndpointError(f"{self.where} {exc}", "an answer that breaks its request cannot "
                                "be part of a result; see the server's log") from None
        if ids or said:
            if self.first_at is None:
                self.first_at = time.perf_counter()
                self._on_first(ids, said, self.first_at)
                self.guard.what = "streaming"
            self.ids += ids
            if said:
                self.text.append(said)
        else:
            self._no_token()

    def _no_token(self) -> None:
        """One more event without a token; too many of them is an endless stream."""
        self._empty += 1
        most = max(self.bounds.max_empty_events, self.expected.max_tokens)
        if self._empty > most:
            raise EndpointError(f"{self.where} streamed {self._empty} events without a token "
                                f"(after {len(self.ids)} tokens): an endless stream",
                                "see the server's log")

    def _check(self, ids: list[Any]) -> None:
        """Raise _Broken when one event's ``ids`` break the request: more tokens (text chunks)
        than max_tokens, ids that are not integers in range, a token after the EOS token."""
        want = self.expected
        self._chunks += 1
        count = len(self.ids) + len(ids) if ids else self._chunks
        if count > want.max_tokens:
            what = "tokens" if ids else "text chunks (a token or more each)"
            raise _Broken(f"streamed {count} {what}, more than the request's max_tokens "
                          f"{want.max_tokens}")
        if not ids:
            return
        bad = bad_token_id(ids, want.id_limit, want.vocabulary)
        if bad is not None:
            raise _Broken(f"streamed a chunk, after {len(self.ids)} tokens, whose {bad}")
        eos = want.eos_id
        if eos is not None:
            if self._after_eos or eos in ids[:-1]:
                at = len(self.ids) - 1 if self._after_eos else len(self.ids) + ids.index(eos)
                raise _Broken(f"streamed tokens after the EOS token {eos} (token {at} of the "
                              "answer): it must end there")
            self._after_eos = ids[-1] == eos

    def _end_of_body(self) -> None:
        self._ended = True
        if self._state == _DRAIN:
            self._release(True)
        elif self._state == _OVER:
            return
        elif self._state == _ERROR_BODY:
            self._fail(self._refusal())
        elif self._finished:
            self._complete()
        else:
            self._fail(EndpointError(f"{self.where} closed the connection after "
                                     f"{len(self.ids)} tokens, before [DONE]",
                                     "the server dropped the request; see its log"))

    def _refusal(self) -> EndpointError:
        text = self._error_text.decode("utf-8", "replace").strip()
        hint = {429: "the server is rate limiting: lower the concurrency or the target QPS",
                401: f"set the API key in ${self._key_env}",
                404: "check the URL and that the server offers this endpoint and model"
                }.get(self._status, "see the server's log")
        said = _server_says(text)
        return EndpointError(f"{self.where} answered HTTP {self._status}: {said}", hint,
                             self._status, said)

    # -- the end ------------------------------------------------------------------------------

    def _stopped(self) -> bool:
        """Nothing more to parse: released, or failed/complete without a framing to drain."""
        return self._state == _OVER or (self.done.done() and self._state != _DRAIN)

    def _complete(self) -> None:
        if not self.done.done():
            self.done.set_result(None)
        if self._error_timer is not None:
            self._error_timer.cancel()
        if self._state == _DRAIN or self._state == _OVER:
            return
        if self._keep and self._on_release is not None and not self.lost:
            if self._ended:
                self._release(True)
            else:  # [DONE] came: read the framing's end (a blank line, the terminator)
                self._state = _DRAIN
                self._drain_timer = asyncio.get_running_loop().call_later(
                    self.bounds.error_body_s, self._release, False)
        else:
            self._release(False)

    def _fail(self, exc: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(exc)
        self._release(False)

    def abandon(self) -> None:
        """The request ended before its response (cancelled): the connection is closed."""
        self._release(False)

    def _release(self, reusable: bool) -> None:
        """Once: the connection goes back to its owner (``reusable``) or is closed."""
        if self._state == _OVER:
            return
        self._state = _OVER
        for timer in (self._error_timer, self._drain_timer):
            if timer is not None:
                timer.cancel()
        reusable = reusable and self._keep and not self.lost and self._on_release is not None
        if self._on_release is not None:
            self._on_release(reusable)
        elif self.transport is not None:
            self.transport.close()


def tokens_of(choice: dict[str, Any], chat: bool) -> tuple[list[int], str]:
    """The token ids and text of one streamed choice: ``token_ids`` (vLLM's
    ``return_token_ids``), else ``token_id:N`` logprob tokens; text from ``text`` or, in chat,
    ``delta.content``. Raises _Broken for ids that are no list, or a ``token_id:`` token
    whose id is no integer; the ids are not checked further here."""
    if chat:
        delta = choice.get("delta") or {}
        text = delta.get("content") if type(delta) is dict else None
    else:
        text = choice.get("text")
    if type(text) is not str:
        text = ""
    ids = choice.get("token_ids")
    if ids is None:
        logprobs = choice.get("logprobs") or {}
        tokens = logprobs.get("tokens") or [c.get("token", "") for c in
                                            logprobs.get("content") or [] if type(c) is dict]
        return [_logprob_id(t) for t in tokens
                if type(t) is str and t.startswith("token_id:")], text
    if type(ids) is not list:
        raise _Broken(f"streamed token_ids as {type(ids).__name__} {_short(ids)}, not a list of "
                      "integers")
    return ids, text


def _logprob_id(token: str) -> int:
    """The id of a ``token_id:N`` logprob token (ASCII digits only: ``int`` also takes
    ``"1_0"``, spaces and other scripts' digits)."""
    digits = token[len("token_id:"):]
    plain = digits[1:] if digits.startswith("-") else digits
    if not (plain.isascii() and plain.isdigit()):
        raise _Broken(f"streamed the logprob token {_short(token)}, whose id is no integer")
    if len(plain) > 12:  # beyond int32 either way; int() of a huge text is slow
        return INT32_LIMIT if digits[0] != "-" else -1
    return int(digits)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else (
        f"{n >> 10} KiB" if n >= 1 << 10 and not n % (1 << 10) else f"{n} bytes")


def _shown(data: bytes) -> str:
    return scrub(data[:80].decode("utf-8", "replace"))


def _server_says(said: Any) -> str:
    """A server's error as one line of at most 200 characters: its ``message`` when it sent
    an OpenAI error object (``{"error": {"message": ...}}`` or ``{"object": "error", ...}``),
    else its text; secrets masked (a server may echo the request's Authorization header)."""
    if isinstance(said, str):
        try:
            said = json.loads(said)
        except ValueError:
            pass
    if isinstance(said, dict):
        inner = said.get("error", said)
        message = inner.get("message") if isinstance(inner, dict) else inner
        said = message if message is not None else said
    text = " ".join(str(said).split())
    return scrub(text[:400])[:200]
