"""The SSE response protocol of the openai client, fed bytes as a socket may cut them: the same
ids, text and finish whatever the reads, chunked, sized or up to close, an event split across
chunks, and a refusal's body in its error."""

from __future__ import annotations

import asyncio
import json

import pytest

from mlharness.backends.openai_sse import EndpointError, SseResponse

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
EVENTS = [json.dumps({"choices": [{"text": f" t{i}", "token_ids": [i], "finish_reason": None}]})
          for i in range(5)] + [json.dumps({"choices": [{"text": "", "finish_reason": "stop"}]})]
SSE = b"".join(f"data: {e}\n\n".encode() for e in EVENTS) + b"data: [DONE]\n\n"


def _chunked(pieces: list[bytes]) -> bytes:
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces) + b"0\r\n\r\n"


class _Guard:
    what = ""

    def touch(self) -> None:
        pass


class _Transport:
    def close(self) -> None:
        pass


def _read(raw: bytes, step: int, close: bool = False) -> SseResponse:
    firsts: list[tuple[list[int], str]] = []

    async def main() -> SseResponse:
        response = SseResponse("http://x/v1/completions", False, _Guard(),
                               lambda ids, text, at: firsts.append((ids, text)))
        response.connection_made(_Transport())  # type: ignore[arg-type]
        for i in range(0, len(raw), step):
            response.data_received(raw[i:i + step])
        if close:
            response.connection_lost(None)
        assert response.done.done()
        response.done.result()
        return response

    response = asyncio.run(main())
    assert firsts == [([0], " t0")]
    return response


@pytest.mark.parametrize("step", [1, 2, 7, 64, 10**6])
@pytest.mark.parametrize("framing", ["chunked", "chunked-split-events", "sized", "close"])
def test_the_same_answer_however_the_bytes_come(step, framing):
    if framing == "chunked":
        raw = HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(
            [event + b"\n\n" for event in SSE.split(b"\n\n")[:-1]])
    elif framing == "chunked-split-events":  # chunks that cut events in odd places
        raw = HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(
            [SSE[i:i + 11] for i in range(0, len(SSE), 11)])
    elif framing == "sized":
        raw = HEAD + f"Content-Length: {len(SSE)}\r\n\r\n".encode() + SSE
    else:
        raw = HEAD + b"\r\n" + SSE.replace(b"data: [DONE]\n\n", b"")  # no [DONE]: ends at close
    response = _read(raw, step, close=framing == "close")
    assert response.ids == [0, 1, 2, 3, 4]
    assert "".join(response.text) == " t0 t1 t2 t3 t4" and response.finish == "stop"


def test_a_refusal_carries_its_body_and_a_hint():
    body = b'{"error": "slow down"}'
    raw = b"HTTP/1.1 429 Too Many\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunked([body])

    async def main() -> None:
        response = SseResponse("http://x/v1/completions", False, _Guard(), lambda *a: None)
        response.connection_made(_Transport())  # type: ignore[arg-type]
        response.data_received(raw)
        await response.done

    with pytest.raises(EndpointError, match="answered HTTP 429: .*slow down") as err:
        asyncio.run(main())
    assert "rate limiting" in err.value.hint
