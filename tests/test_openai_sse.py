"""The SSE response protocol of the openai client, fed bytes as a socket may cut them: the same
ids, text and finish whatever the reads, chunked, sized or up to close, an event split across
chunks, and a refusal's body in its error."""

from __future__ import annotations

import asyncio
import json

import pytest

from mlharness.backends.openai_sse import EndpointError, Expected, SseResponse

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
EVENTS = [json.dumps({"choices": [{"text": f" t{i}", "token_ids": [i], "finish_reason": None}]})
          for i in range(5)] + [json.dumps({"choices": [{"text": "", "finish_reason": "stop"}]})]
SSE = b"".join(f"data: {e}\n\n".encode() for e in EVENTS) + b"data: [DONE]\n\n"


def _chunked(pieces: list[bytes]) -> bytes:
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces) + b"0\r\n\r\n"


class _Guard:
    what = ""
    trickled = 0

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


def _events(*choices: dict) -> bytes:
    sse = b"".join(f"data: {json.dumps({'choices': [c]})}\n\n".encode() for c in choices)
    return HEAD + f"Content-Length: {len(sse)}\r\n\r\n".encode() + sse


def _fails(raw: bytes, **expected) -> str:
    async def main() -> None:
        response = SseResponse("http://x/v1/completions", False, _Guard(), lambda *a: None,
                               expected=Expected(**expected))
        response.connection_made(_Transport())  # type: ignore[arg-type]
        response.data_received(raw)
        await response.done

    with pytest.raises(EndpointError) as err:
        asyncio.run(main())
    assert "\n" not in err.value.message
    return err.value.message


def _ids(*values: object) -> bytes:
    return _events(*({"text": " t", "token_ids": v, "finish_reason": None} for v in values))


@pytest.mark.parametrize(("raw", "said"), [
    (_ids("12345"), "token_ids as str '12345', not a list of integers"),
    (_ids(7), "token_ids as int 7, not a list"),
    (_ids({"a": 1}), "token_ids as dict"),
    (_ids([1.9]), "token id 1.9 at position 0 is not an integer"),
    (_ids([True]), "token id True at position 0 is not an integer"),
    (_ids(["5"]), "token id '5' at position 0 is not an integer"),
    (_ids([None]), "token id None at position 0 is not an integer"),
    (_ids([5], [6, -1]), "after 1 tokens, whose token id -1 at position 1 is outside int32"),
    (_ids([2**31]), "token id 2147483648 at position 0 is outside int32 (0..2147483647)"),
    (_ids([10**30]), "outside int32"),
    (_events({"text": " t", "logprobs": {"tokens": ["token_id:1_0"]}}), "'token_id:1_0'"),
    (_events({"text": " t", "logprobs": {"tokens": ["token_id:٣"]}}), "whose id is no integer"),
    (_events({"text": " t", "logprobs": {"tokens": ["token_id:" + "9" * 5000]}}),
     "outside int32"),
    (_events({"text": " t", "logprobs": {"tokens": ["token_id:-3"]}}), "-3 at position 0"),
])
def test_ids_that_are_not_int32_integers_fail_the_request_naming_the_endpoint(raw, said):
    message = _fails(raw, max_tokens=100)
    assert message.startswith("http://x/v1/completions streamed ") and said in message, message


def test_ids_beyond_the_vocabulary_fail_when_it_is_known():
    assert "outside the vocabulary (0..31999)" in _fails(_ids([5], [32000]), max_tokens=9,
                                                         id_limit=32000, vocabulary=True)


@pytest.mark.parametrize(("chunks", "said"), [
    ([[1, 2], [3, 4, 5]], "streamed 5 tokens, more than the request's max_tokens 4"),
    ([[1], [2, 3, 4, 5, 6]], "streamed 6 tokens"),
])
def test_more_tokens_than_asked_fail_at_the_event_that_breaks_it(chunks, said):
    assert said in _fails(_ids(*chunks), max_tokens=4)


def test_more_text_chunks_than_tokens_asked_fail_a_text_only_stream():
    raw = _events(*({"text": f" w{i}", "finish_reason": None} for i in range(5)))
    assert "streamed 5 text chunks (a token or more each)" in _fails(raw, max_tokens=4)


@pytest.mark.parametrize(("chunks", "at"), [([[5, 2, 6]], 1), ([[5, 2], [6]], 1),
                                            ([[2], [2]], 0)])
def test_a_token_after_the_eos_token_fails(chunks, at):
    message = _fails(_ids(*chunks), max_tokens=9, eos_id=2)
    assert f"tokens after the EOS token 2 (token {at} of the answer)" in message


def test_an_answer_within_its_request_is_read_as_it_came():
    raw = _events({"text": " t", "token_ids": [5, 6]},
                  {"text": "", "token_ids": [2], "finish_reason": "stop"})

    async def main() -> SseResponse:
        response = SseResponse("http://x/v1/completions", False, _Guard(), lambda *a: None,
                               expected=Expected(max_tokens=3, id_limit=10, vocabulary=True,
                                                 eos_id=2))
        response.connection_made(_Transport())  # type: ignore[arg-type]
        response.data_received(raw)
        response.connection_lost(None)
        return response

    response = asyncio.run(main())
    response.done.result()
    assert response.ids == [5, 6, 2] and response.finish == "stop"


@pytest.mark.parametrize("choice", [{"text": 5, "token_ids": [1]}, {"delta": "x"},
                                    {"logprobs": {"content": [3]}, "text": " t"}])
def test_odd_types_elsewhere_are_read_or_named_never_raised(choice):
    raw = _events(choice, {"text": "", "finish_reason": "stop"})

    async def main() -> SseResponse:
        response = SseResponse("http://x/v1/completions", False, _Guard(), lambda *a: None)
        response.connection_made(_Transport())  # type: ignore[arg-type]
        response.data_received(raw)
        response.connection_lost(None)
        return response

    response = asyncio.run(main())
    assert response.done.done() and response.finish == "stop"
