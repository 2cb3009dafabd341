"""The openai client's keep-alive connection pool against the scripted server: a connection is
reused after a clean answer (chunked SSE to its terminator, or a sized body), never after a
refusal, a cut, a broken bound, ``Connection: close``, HTTP/1.0 or bytes beyond the answer; a
reused connection the server closed is retried once on a new one only when nothing came; the
backend pre-warms its pool before the test, reports what it opened and reused, and names a limit
that held paced queries. No timing is asserted: the server counts its connections."""

from __future__ import annotations

import asyncio
import json
import re
import time

import pytest
from llm_server import EVENT, Script, ScriptedServer, chunk, huge_line
from test_openai_backend import _request, _run, backends  # noqa: F401 - the fixture

from mlharness.backends.base import IssuePattern
from mlharness.backends.openai import OpenAIBackend
from mlharness.backends.openai_admit import PACED_FLOOR, PACED_MARGIN, paced_connections
from mlharness.backends.openai_stream import ClientSettings, EndpointError, OpenAIStreamClient

FAST = {"ttft_s": 0.01, "gap_s": 0.001, "n_tokens": 4}
DONE_EVENT = b'data: {"choices": [{"text": "", "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'


def _client(url: str, **kw) -> OpenAIStreamClient:
    return OpenAIStreamClient(ClientSettings(base_url=url, model="m", **kw))


def _outcomes(client: OpenAIStreamClient, n: int, max_tokens: int = 8) -> list[object]:
    """``n`` requests one after another on one loop: each result, or its error."""
    async def main() -> list[object]:
        out: list[object] = []
        for _ in range(n):
            try:
                out.append(await client.complete("x", max_tokens=max_tokens))
            except EndpointError as exc:
                out.append(exc)
        return out
    return asyncio.run(main())


def _until(condition, timeout_s: float = 20.0) -> None:
    """Wait for ``condition`` (the server's thread counts what it accepted)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not reached"
        time.sleep(0.01)


def _sized(head: bytes = b"HTTP/1.1 200 OK", extra: bytes = b"", more: bytes = b""):
    """An answer with a Content-Length body (``extra`` after the body; ``more`` in the head)."""
    body = EVENT + DONE_EVENT

    async def act(writer: asyncio.StreamWriter) -> None:
        writer.write(head + b"\r\nContent-Type: text/event-stream\r\n" + more
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body + extra)
        await writer.drain()
    return act


def test_a_connection_is_reused_after_a_clean_chunked_answer():
    with ScriptedServer(Script(keep_alive=True, **FAST)) as server:
        client = _client(server.url)
        results = _outcomes(client, 5)
    assert all(not isinstance(r, Exception) and r.n_tokens == 4 for r in results)
    assert server.connections == 1 and len(server.seen) == 5
    assert client.pool.report() == {"opened": 1, "prewarmed": 0, "reused": 4,
                                    "stale_retried": 0, "idle": 1}


def test_a_sized_answer_is_reused_and_a_text_server_without_done_too():
    with ScriptedServer(Script(keep_alive=True, act=_sized())) as server:
        results = _outcomes(_client(server.url), 3)
        assert [r.token_ids for r in results] == [[5]] * 3 and server.connections == 1
    text_only = Script(keep_alive=True, token_ids=False, done=False, **FAST)
    with ScriptedServer(text_only) as server:
        client = _client(server.url, token_ids=False)

        def tokenize(text: str) -> list[int]:
            return [int(word[1:]) for word in text.split()]

        async def three() -> list[int]:
            return [len((await client.complete("x", max_tokens=8, tokenize=tokenize)).text)
                    for _ in range(3)]
        assert asyncio.run(three()) and server.connections == 1


@pytest.mark.parametrize(("script", "error"), [
    (Script(keep_alive=True, fault="500", **FAST), "answered HTTP 500"),
    (Script(keep_alive=True, fault="error_event", **FAST), "reported an error mid-stream"),
    (Script(keep_alive=True, fault="drop", **FAST), "closed the connection after 2 tokens"),
    (Script(keep_alive=True, ignore_max_tokens=True, ttft_s=0.01, gap_s=0.001, n_tokens=12),
     "more than the request's max_tokens"),
    (Script(keep_alive=True, act=huge_line(1)), "a line \\(an event\\) of more than"),
    (Script(keep_alive=True, connection_close=True, **FAST), None),
    (Script(keep_alive=True, act=_sized(b"HTTP/1.0 200 OK")), None),
    (Script(keep_alive=True, act=_sized(more=b"Connection: close\r\n")), None),
    (Script(keep_alive=True, act=_sized(extra=b"HTTP/1.1 200 OK\r\n")), None),
])
def test_no_reuse_after_an_error_a_cut_a_bound_or_a_close(script, error):
    """Each answer ends its connection: the second request opens a new one."""
    with ScriptedServer(script) as server:
        client = _client(server.url, max_event_bytes=64 << 10)
        results = _outcomes(client, 2)
    for result in results:
        if error is None:
            assert not isinstance(result, Exception), result
        else:
            assert isinstance(result, EndpointError)
            assert re.search(error, result.message), result.message
    assert server.connections == 2 and client.pool.report()["reused"] == 0


def test_data_after_done_closes_the_connection():
    """A stream that goes on after ``[DONE]`` (an endless one): the answer is complete, the
    connection is not reused."""
    async def act(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + chunk(EVENT + DONE_EVENT))
        for _ in range(50):
            writer.write(chunk(EVENT))
            await writer.drain()
            await asyncio.sleep(0.01)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    with ScriptedServer(Script(keep_alive=True, act=act)) as server:
        results = _outcomes(_client(server.url), 2)
    assert [r.token_ids for r in results] == [[5], [5]]
    assert server.connections == 2


def test_a_stale_connection_is_retried_once_on_a_new_one():
    """The server drops a kept connection as the next request comes (its idle timeout): sent
    again on a new connection, no error; a connection cut after part of an answer is the
    request's error, not retried."""
    with ScriptedServer(Script(keep_alive=True, close_after=1, **FAST)) as server:
        client = _client(server.url)
        results = _outcomes(client, 3)
        assert all(not isinstance(r, Exception) for r in results), results
        assert client.pool.report()["stale_retried"] == 2 and server.connections == 3
        server.script.close_after = 0
        server.script.act = _half_then_close
        failed = _outcomes(client, 2)
    # something of the answer came: not retried, the request's own error
    assert all(isinstance(r, EndpointError) for r in failed)
    assert client.pool.report()["stale_retried"] == 2


async def _half_then_close(writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk(EVENT))
    await writer.drain()
    writer.transport.abort()


def test_the_server_answers_the_same_over_a_kept_connection_and_a_new_one():
    with ScriptedServer(Script(keep_alive=True, **FAST)) as kept, \
            ScriptedServer(Script(**FAST)) as fresh:
        a = [r.token_ids for r in _outcomes(_client(kept.url), 3)]  # type: ignore[union-attr]
        b = [r.token_ids for r in _outcomes(_client(fresh.url), 3)]  # type: ignore[union-attr]
    assert a == b == [[100, 101, 102, 103]] * 3
    assert (kept.connections, fresh.connections) == (1, 3)
    assert "connection" not in {k.lower() for k in kept.seen[0].headers}  # keep-alive: 1.1's


def test_the_backend_prewarms_and_reports_its_connections(backends):  # noqa: F811
    with ScriptedServer(Script(keep_alive=True, **FAST)) as server:
        backend: OpenAIBackend = backends(server.url, concurrency=6)
        backend.issue_pattern(IssuePattern(all_at_once=True))
        _until(lambda: server.connections == 6)  # opened before any request
        out = _run(backend, [_request(i) for i in range(12)])
        assert not out.errors()
        report = backend.report()
    pool = report["connections"][server.url]
    assert pool["prewarmed"] == 6 and pool["opened"] == server.connections == 6
    assert pool["reused"] == 6 and "bound" not in report  # Offline: the limit is its purpose
    json.dumps(report)


def test_paced_queries_are_not_held_and_a_given_limit_that_holds_them_is_named(backends):  # noqa: F811
    with ScriptedServer(Script(keep_alive=True, ttft_s=0.2, gap_s=0.001, n_tokens=2)) as server:
        free = backends(server.url, max_concurrency=2)
        free.issue_pattern(IssuePattern(all_at_once=False))
        out = _run(free, [_request(0)])  # the first answer opens the gate
        out = _run(free, [_request(i) for i in range(8)])
        assert not out.errors()
        free_report = free.report()
        given = backends(server.url, concurrency=2)
        given.issue_pattern(IssuePattern(all_at_once=False))
        _run(given, [_request(0)])
        assert not _run(given, [_request(i) for i in range(8)]).errors()
        given_report = given.report()
    assert free_report["concurrency"]["held"] == 0 and "bound" not in free_report
    assert free_report["concurrency"]["peak_in_flight"] == 8  # past max_concurrency=2
    assert given_report["concurrency"]["held"] >= 6
    assert "concurrency=2 held" in given_report["bound"]


def test_the_scenario_names_how_loadgen_issues():
    assert IssuePattern.of("Offline", 5.0, 0.5) == IssuePattern(all_at_once=True, request_s=0.5)
    assert IssuePattern.of("SingleStream", None, 0.5).sequential
    server = IssuePattern.of("Server", 120.0, 0.5)
    assert (server.all_at_once, server.sequential, server.target_qps) == (False, False, 120.0)
    assert IssuePattern.of("Interactive", 3.0).request_s is None


def test_paced_connections_follow_littles_law_with_a_margin_and_bounds():
    paced = IssuePattern.of("Server", 800.0, 4.0)  # 3,200 in flight at 800 QPS x 4 s
    n, why = paced_connections(paced, cap=256, spare=None)
    assert n == 800 * 4 * PACED_MARGIN and "800 QPS x 4.000 s" in why and "Little" in why
    assert paced_connections(paced, cap=256, spare=5000)[0] == 5000  # half the descriptors
    assert "file-descriptor" in paced_connections(paced, 256, 5000)[1]
    assert paced_connections(IssuePattern.of("Server", 1.0, 0.1), 256, None)[0] == PACED_FLOOR
    assert paced_connections(IssuePattern.of("SingleStream", None, 3.0), 256, None)[0] == 1
    no_warmup, why = paced_connections(IssuePattern.of("Server", 800.0), 256, None)
    assert no_warmup == 256 and "max_concurrency" in why and "warm-up" in why
    assert paced_connections(IssuePattern.of("MultiStream"), 64, None) == (
        64, "max_concurrency (no target QPS)")


def test_paced_queries_prewarm_the_connections_their_rate_keeps_in_flight(backends):  # noqa: F811
    with ScriptedServer(Script(keep_alive=True, **FAST)) as server:
        backend: OpenAIBackend = backends(server.url, max_concurrency=2)
        backend.issue_pattern(IssuePattern.of("Server", 40.0, 0.5))  # 40 QPS x 0.5 s x 2
        _until(lambda: server.connections == 40)  # opened before any request, past max_c..=2
        assert not _run(backend, [_request(0)]).errors()  # the warm-up: opens the first gate
        assert not _run(backend, [_request(i) for i in range(12)]).errors()
        report = backend.report()
    concurrency, pool = report["concurrency"], report["connections"][server.url]
    assert concurrency["expected"] == pool["prewarmed"] == 40, report
    assert "40 QPS x 0.500 s" in concurrency["expected_from"] and concurrency["held"] == 0
    assert pool["opened"] == server.connections == 40  # the requests found them open


def test_the_prewarm_keeps_half_the_file_descriptors_free(backends, monkeypatch):  # noqa: F811
    import resource

    from mlharness import hostinfo
    from mlharness.backends import openai

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert hostinfo.spare_descriptors() == (None if soft == resource.RLIM_INFINITY else soft // 2)
    monkeypatch.setattr(openai, "spare_descriptors", lambda: 5)  # a process allowed 10
    with ScriptedServer(Script(keep_alive=True, **FAST)) as server:
        backend: OpenAIBackend = backends(server.url)
        backend.issue_pattern(IssuePattern.of("Server", 1000.0, 1.0))  # 2,000 by Little's law
        _until(lambda: server.connections == 5)
        concurrency = backend.report()["concurrency"]
    assert concurrency["expected"] == 5 and "file-descriptor" in concurrency["expected_from"]
