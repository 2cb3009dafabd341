"""The openai backend for a multimodal benchmark (qwen3-vl): the served model asked of the server
(GET /v1/models) when none is given, chat messages with image parts sent as they are to
/v1/chat/completions, no sampling key when the request leaves sampling to the server, and the
answer's text handed back with its ids."""

from __future__ import annotations

import threading

import pytest
from vlm_server import FIRST_ID, VlmServer, tokens

from mlharness.backends import BackendOptions, backend_options, create_backend
from mlharness.backends.openai import OpenAIBackend
from mlharness.errors import ConfigError
from mlharness.prompts import Generated, GenerationRequest

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/PNG;base64,iVBORw0KGgo="}}
MESSAGES = ({"role": "system", "content": "answer in JSON"},
            {"role": "user", "content": [{"type": "text", "text": "what is it?"}, IMAGE]})


def _load(url: str, **extra: object) -> OpenAIBackend:
    backend = create_backend("openai")
    assert isinstance(backend, OpenAIBackend)
    backend.load(None, BackendOptions(extra=backend_options(backend, {"endpoints": [url], **extra})))
    return backend


def _ask(backend: OpenAIBackend, request: GenerationRequest) -> list[tuple[str, object]]:
    events: list[tuple[str, object]] = []
    done = threading.Event()
    backend.submit(request, lambda ids: events.append(("first", ids)),
                   lambda ids: (events.append(("done", ids)), done.set()),
                   lambda msg: (events.append(("error", msg)), done.set()))
    assert done.wait(20)
    return events


def test_the_served_model_is_asked_and_said() -> None:
    answer = '{"category": "A > B", "brand": "x", "is_secondhand": false}'
    with VlmServer(lambda body: answer) as server:
        backend = _load(server.url + "/v1")
        try:
            assert "GET /v1/models" in server.paths
            described = backend.describe()
            assert described["served_model"] == "Qwen/Qwen3-VL-235B-A22B-Instruct"
            assert described["notes"] == ["served model 'Qwen/Qwen3-VL-235B-A22B-Instruct': the "
                                          f"one model GET /v1/models lists at {server.url}"]
            request = GenerationRequest(input_ids=None, text=None, max_new_tokens=150,
                                        messages=MESSAGES, server_sampling=True)
            events = _ask(backend, request)
        finally:
            backend.close()
    ids = [FIRST_ID + i for i in range(len(tokens(answer)))]
    assert events == [("first", ids[:1]), ("done", ids)]
    done = events[-1][1]
    assert isinstance(done, Generated) and done.text == answer
    body = server.seen[0]
    # chat chosen by the messages; the image part as given; no sampling key at all
    assert server.paths[-1] == "POST /v1/chat/completions"
    assert body["messages"] == [dict(m) for m in MESSAGES]
    assert body["model"] == "Qwen/Qwen3-VL-235B-A22B-Instruct" and body["max_tokens"] == 150
    assert not {"temperature", "top_p", "top_k", "min_tokens"} & set(body)


def test_a_given_served_model_asks_nothing_and_sampling_is_sent() -> None:
    with VlmServer(lambda body: "fine") as server:
        backend = _load(server.url, served_model="mine")
        try:
            events = _ask(backend, GenerationRequest(input_ids=None, text=None,
                                                     max_new_tokens=8, messages=MESSAGES))
        finally:
            backend.close()
    assert "GET /v1/models" not in server.paths and "notes" not in backend.describe()
    assert events[-1][0] == "done" and server.seen[0]["model"] == "mine"
    assert (server.seen[0]["temperature"], server.seen[0]["top_p"]) == (0.0, 1.0)


@pytest.mark.parametrize("models", [[], ["a", "b"]])
def test_not_exactly_one_model_is_refused(models: list[str]) -> None:
    with VlmServer(lambda body: "", models=models) as server:
        with pytest.raises(ConfigError, match="do not serve exactly one model") as err:
            _load(server.url)
    assert err.value.hint == "give --backend-option served_model=NAME (the server's model id)"
    assert (", ".join(models) or "none") in err.value.message


def test_a_server_without_a_model_list_is_said() -> None:
    with VlmServer(lambda body: "") as server:
        url = server.url + "/nothing"  # a prefix under which nothing answers: HTTP 404
        with pytest.raises(ConfigError, match="answered HTTP 404") as err:
            _load(url)
    assert "served_model=NAME" in err.value.hint


@pytest.mark.parametrize("models", [["x" * 300], ["two\nlines"]])
def test_a_model_list_of_odd_ids_is_refused(models: list[str]) -> None:
    with VlmServer(lambda body: "", models=models) as server:
        with pytest.raises(ConfigError, match="not an OpenAI model list"):
            _load(server.url)
