"""The asyncio OpenAI streaming client against the scripted server: measured TTFT/TPOT, token
ids and callbacks, the API key, and each fault as a clear error naming the endpoint."""

from __future__ import annotations

import asyncio
import socket
import statistics
import threading

import pytest
from llm_server import Script, ScriptedServer

from mlharness.backends.openai_stream import (
    ClientSettings,
    EndpointError,
    OpenAIStreamClient,
    StreamResult,
)
from mlharness.errors import ConfigError


def _client(url: str, **kw) -> OpenAIStreamClient:
    return OpenAIStreamClient(ClientSettings(base_url=url, model="m", **kw))


@pytest.mark.parametrize("keep_alive", [False, True])
def test_measured_ttft_and_tpot_match_the_injected_values(keep_alive):
    """What the client reports is what the server did; with keep-alive, the second round goes
    on the first round's connections (reused) and is the one compared."""
    script = Script(ttft_s=0.3, gap_s=0.05, n_tokens=10, first_id=500, keep_alive=keep_alive)
    firsts: list[tuple[list[int], float]] = []
    done: list[StreamResult] = []
    threads: list[int] = []

    async def main(url: str) -> list[StreamResult]:
        client = _client(url)
        base = threading.active_count()

        def on_first(ids: list[int], ttft: float) -> None:
            firsts.append((ids, ttft))
            threads.append(threading.active_count() - base)

        async def on_done(result: StreamResult) -> None:
            done.append(result)

        results = await asyncio.gather(*(
            client.complete(f"prompt {i}", max_tokens=64, on_first_token=on_first,
                            on_done=on_done) for i in range(8)))
        if keep_alive:  # again, on the same connections
            firsts.clear(), done.clear(), threads.clear(), server.seen.clear()
            results = await asyncio.gather(*(
                client.complete(f"prompt {i}", max_tokens=64, on_first_token=on_first,
                                on_done=on_done) for i in range(8)))
            assert client.pool.report()["reused"] == 8
        return results

    with ScriptedServer(script) as server:
        results = asyncio.run(main(server.url))
    seen = server.seen
    assert server.connections == 8
    assert len(results) == len(done) == len(firsts) == 8 == len(seen)
    assert threads == [0] * 8  # eight streams at once, no thread for any of them
    for r in results:
        assert r.token_ids == list(range(500, 510)) and r.n_tokens == 10
        assert r.text == "".join(f" t{i}" for i in range(500, 510))
        assert r.finish_reason == "stop"
    assert all(ids == [500] for ids, _ in firsts)
    ttft = statistics.median(r.ttft_s for r in results)
    tpot = statistics.median(r.tpot_s for r in results)
    # what the client measured is what the server did (same clock, same process) ...
    assert ttft == pytest.approx(statistics.median(s.ttft_s() for s in seen), rel=0.15)
    assert tpot == pytest.approx(statistics.median(s.tpot_s() for s in seen), rel=0.15)
    # ... and, unless the machine kept the server itself from its schedule, the injected values
    late = [f"{name} {got * 1e3:.1f} ms instead of {want * 1e3:g}" for name, got, want in (
        ("TTFT", statistics.median(s.ttft_s() for s in seen), script.ttft_s),
        ("TPOT", statistics.median(s.tpot_s() for s in seen), script.gap_s))
        if abs(got / want - 1) > 0.1]
    # never less than injected; equal to it unless the machine made the server itself late
    # (then the comparison with what it really sent, above, is the one that holds)
    assert ttft >= script.ttft_s * 0.85 and tpot >= script.gap_s * 0.85, (ttft, tpot)
    if not late:
        assert ttft == pytest.approx(script.ttft_s, rel=0.15)
        assert tpot == pytest.approx(script.gap_s, rel=0.15)


def test_chat_logprob_ids_max_tokens_and_the_api_key(monkeypatch):
    monkeypatch.setenv("MLH_TEST_LLM_KEY", "sk-very-secret")
    with ScriptedServer(Script(ttft_s=0.01, gap_s=0.001, n_tokens=10)) as server:
        client = _client(server.url, api_key_env="MLH_TEST_LLM_KEY")
        r = asyncio.run(client.complete([{"role": "user", "content": "hi"}], max_tokens=4,
                                        chat=True, return_token_ids=False,
                                        return_tokens_as_token_ids=True, logprobs=True))
        assert r.token_ids == [100, 101, 102, 103] and r.finish_reason == "length"
        seen = server.seen[-1]
        assert seen.path == "/v1/chat/completions"
        assert seen.headers["authorization"] == "Bearer sk-very-secret"
        assert seen.body["messages"][0]["content"] == "hi" and seen.body["stream"] is True
        server.script.fault = "500"
        with pytest.raises(EndpointError) as err:
            asyncio.run(client.complete("x", max_tokens=4))
    assert "sk-very-secret" not in str(err.value) + repr(client) + repr(vars(client))


def test_a_text_only_server_without_done():
    """``token_ids=False`` (transformers serve): no ``return_token_ids`` asked (that server
    refuses unknown keys), the text tokenized, and a body that ends after the finishing chunk
    without ``[DONE]`` is complete; without a finishing chunk it is still a dropped stream."""
    def tokenize(text: str) -> list[int]:
        return [int(word[1:]) for word in text.split()]

    script = Script(ttft_s=0.01, gap_s=0.001, n_tokens=3, token_ids=False, done=False)
    with ScriptedServer(script) as server:
        r = asyncio.run(_client(server.url, token_ids=False).complete(
            [{"role": "user", "content": "hi"}], max_tokens=8, chat=True, tokenize=tokenize))
        assert "return_token_ids" not in server.seen[-1].body
        assert r.text == " t100 t101 t102" and r.token_ids == [100, 101, 102]
        assert r.finish_reason == "stop"
        server.script.fault, server.script.fault_after = "drop", 2
        with pytest.raises(EndpointError, match="before \\[DONE\\]"):
            asyncio.run(_client(server.url, token_ids=False).complete(
                "x", max_tokens=8, tokenize=tokenize))


@pytest.mark.parametrize(("fault", "message"), [
    ("drop", "closed the connection after 2 tokens, before \\[DONE\\]"),
    ("stall", "stalled: no progress for 0.5 s while streaming .nothing came."),
    ("malformed", "malformed stream event after 2 tokens"),
    ("429", "answered HTTP 429: .*scripted 429"),
    ("500", "answered HTTP 500"),
])
def test_each_fault_is_a_clear_error_naming_the_endpoint(fault, message):
    with ScriptedServer(Script(ttft_s=0.01, gap_s=0.001, fault=fault)) as server:
        client = _client(server.url, stall_timeout_s=0.5)
        with pytest.raises(EndpointError, match=message) as err:
            asyncio.run(client.complete("x", max_tokens=8))
    assert f"{server.url}/v1/completions" in err.value.message
    assert err.value.hint
    if fault == "429":
        assert "rate limiting" in err.value.hint


def test_refused_connection_and_bad_urls():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    client = _client(f"http://127.0.0.1:{port}")
    with pytest.raises(EndpointError, match=f"cannot connect to http://127.0.0.1:{port}/v1/"):
        asyncio.run(client.complete("x", max_tokens=2))
    with pytest.raises(ConfigError, match="not http://host:port"):
        _client("https://example.invalid")


def test_a_wrong_path_is_a_404_with_a_hint():
    with ScriptedServer() as server:
        client = _client(f"{server.url}/openai")
        with pytest.raises(EndpointError, match=r"/openai/v1/completions answered HTTP 404") as e:
            asyncio.run(client.complete("x", max_tokens=2))
    assert "check the URL" in e.value.hint
    assert server.seen[-1].path == "/openai/v1/completions"


def test_the_stall_timeout_counts_from_the_last_event_not_the_request():
    """A stream slower in total than the stall timeout but never silent that long is fine; a
    server silent before its first token is stalled; a cancellation from outside stays one."""
    # gaps 10x shorter than the timeout: a loaded machine delayed one by more than 0.3 s
    with ScriptedServer(Script(ttft_s=0.05, gap_s=0.1, n_tokens=16)) as server:
        client = _client(server.url, stall_timeout_s=1.0)
        r = asyncio.run(client.complete("x", max_tokens=16))
        assert r.n_tokens == 16 and r.total_s > 1.5
        server.script.ttft_s = 2.5
        with pytest.raises(EndpointError, match="stalled: no progress for 1 s while waiting for "
                           "the first token .nothing came."):
            asyncio.run(client.complete("x", max_tokens=8))

        async def cancelled() -> None:
            task = asyncio.ensure_future(client.complete("x", max_tokens=8))
            await asyncio.sleep(0.1)
            task.cancel()
            await task

        with pytest.raises(asyncio.CancelledError):
            asyncio.run(cancelled())
