"""The openai StreamingBackend against the scripted server: ids and callbacks, the request body,
dispatch over two endpoints, failover, faults as one-line errors it survives, the concurrency cap,
a thousand streams on one thread, close, the tokenizer path, and the API key kept out of sight."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import ExitStack

import pytest
from llm_fixtures import import_transformers, make_tokenizer
from llm_server import Script, ScriptedServer

from mlharness.backends import BackendOptions, backend_options, create_backend
from mlharness.backends.base import GenerationRequest, StreamingBackend
from mlharness.backends.openai import OpenAIBackend
from mlharness.errors import ConfigError


class Outcomes:
    """What each request's callbacks reported, in order, and from which thread."""

    def __init__(self) -> None:
        self.events: dict[int, list[tuple[str, object]]] = {}
        self.threads: set[int] = set()
        self._cond = threading.Condition()
        self.finished = 0

    def callbacks(self, i: int):
        self.events[i] = []

        def record(kind: str, value: object) -> None:
            with self._cond:
                self.events[i].append((kind, value))
                self.threads.add(threading.get_ident())
                if kind != "first":
                    self.finished += 1
                    self._cond.notify_all()

        return (lambda ids: record("first", ids), lambda ids: record("done", ids),
                lambda msg: record("error", msg))

    def wait(self, n: int, timeout: float = 20.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.finished >= n, timeout), \
                f"{self.finished} of {n} requests finished"

    def outcome(self, i: int) -> tuple[str, object]:
        ends = [e for e in self.events[i] if e[0] != "first"]
        assert len(ends) == 1, self.events[i]
        return ends[0]

    def errors(self) -> list[str]:
        return [str(v) for i in self.events for k, v in [self.outcome(i)] if k == "error"]


def _request(i: int = 0, **kw) -> GenerationRequest:
    kw.setdefault("input_ids", (1, 2, 3, i))
    kw.setdefault("text", None)
    kw.setdefault("max_new_tokens", 64)
    return GenerationRequest(**kw)


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def backends():
    made: list[OpenAIBackend] = []

    def make(*urls: str, **extra) -> OpenAIBackend:
        backend = create_backend("openai")
        assert isinstance(backend, OpenAIBackend) and isinstance(backend, StreamingBackend)
        extra.setdefault("served_model", "served-m")
        table = backend_options(backend, {"endpoints": list(urls), **extra})
        backend.load(None, BackendOptions(extra=table))
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


def _run(backend: OpenAIBackend, requests: list[GenerationRequest],
         timeout: float = 20.0) -> Outcomes:
    out = Outcomes()
    for i, request in enumerate(requests):
        backend.submit(request, *out.callbacks(i))
    out.wait(len(requests), timeout)
    return out


def test_ids_callbacks_and_the_request_body(backends):
    with ScriptedServer(Script(ttft_s=0.02, gap_s=0.002, n_tokens=10, first_id=500)) as server:
        backend = backends(server.url + "/v1/")
        assert backend.generates and backend.concurrency == 256 and backend.inputs is None
        requests = [_request(i) for i in range(6)] + [
            _request(input_ids=None, text="hello", max_new_tokens=4, min_new_tokens=2,
                     temperature=0.5, top_p=0.9, top_k=-1)]
        out = _run(backend, requests)
    assert threading.get_ident() not in out.threads
    for i in range(6):
        assert out.events[i] == [("first", [500]), ("done", list(range(500, 510)))]
    assert out.events[6] == [("first", [500]), ("done", [500, 501, 502, 503])]
    bodies = {tuple(s.body["prompt"]) if isinstance(s.body["prompt"], list) else s.body["prompt"]:
              s.body for s in server.seen}
    ids_body, text_body = bodies[(1, 2, 3, 0)], bodies["hello"]
    assert all(s.path == "/v1/completions" for s in server.seen)
    assert ids_body["model"] == "served-m" and ids_body["stream"] is True
    assert (ids_body["max_tokens"], ids_body["min_tokens"], ids_body["temperature"],
            ids_body["top_p"], ids_body["top_k"]) == (64, 1, 0.0, 1.0, 1)
    assert (text_body["max_tokens"], text_body["min_tokens"], text_body["temperature"],
            text_body["top_p"]) == (4, 2, 0.5, 0.9)
    assert "top_k" not in text_body  # -1: no limit, left to the server


def test_chat_sends_messages_or_the_text_and_refuses_bare_ids(backends):
    with ScriptedServer(Script(ttft_s=0.01, gap_s=0.001, n_tokens=3)) as server:
        backend = backends(server.url, chat=True)
        messages = ({"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"})
        out = _run(backend, [_request(input_ids=None, messages=messages),
                             _request(input_ids=(5, 6), text="as text"),
                             _request(input_ids=(5, 6))])
    assert out.outcome(0) == ("done", [100, 101, 102]) == out.outcome(1)
    kind, message = out.outcome(2)
    assert kind == "error" and "token ids only" in str(message)
    assert [s.path for s in server.seen] == ["/v1/chat/completions"] * 2
    sent = sorted((s.body["messages"] for s in server.seen), key=len)
    assert sent == [[{"role": "user", "content": "as text"}], [dict(m) for m in messages]]


def test_two_endpoints_share_the_load(backends):
    script = Script(ttft_s=0.2, gap_s=0.005, n_tokens=4)
    with ScriptedServer(script) as a, ScriptedServer(script) as b:
        backend = backends(a.url, b.url)
        out = _run(backend, [_request(i) for i in range(20)])
        assert not out.errors()
        assert 8 <= len(a.seen) <= 12 and len(a.seen) + len(b.seen) == 20
        # one at a time (none outstanding): each goes to the endpoint sent the fewest, so the
        # gap the burst left closes by one a request (or they take turns once it is closed)
        gap = abs(len(a.seen) - len(b.seen))
        _run(backend, [_request(0)])
        _run(backend, [_request(1)])
    assert backend.report()["sent"] == {a.url: len(a.seen), b.url: len(b.seen)}
    assert abs(len(a.seen) - len(b.seen)) == abs(abs(gap - 1) - 1)


def test_failover_sends_a_refused_request_to_the_other_endpoint(backends):
    dead = _dead_url()
    with ScriptedServer(Script(ttft_s=0.01, gap_s=0.001, n_tokens=3)) as server:
        backend = backends(dead, server.url, failover=True)
        out = _run(backend, [_request(i) for i in range(10)])
        assert not out.errors() and len(server.seen) == 10
        assert backend.report()["failovers"] >= 1
        assert backend.describe()["failover"] is True

        plain = backends(dead, server.url)
        out = _run(plain, [_request(i) for i in range(10)])
    errors = out.errors()
    assert errors and all(f"cannot connect to {dead}/v1/completions" in e for e in errors)
    assert all("\n" not in e for e in errors)
    assert len(errors) + sum(out.outcome(i)[0] == "done" for i in out.events) == 10


@pytest.mark.parametrize(("fault", "message", "first"), [
    ("500", "answered HTTP 500", False),
    ("malformed", "malformed stream event after 2 tokens", True),
    ("stall", "stalled: no progress for 0.3 s while streaming", True),
    ("drop", "closed the connection after 2 tokens", True),
])
def test_a_fault_is_one_error_line_and_the_next_request_is_served(backends, fault, message,
                                                                  first):
    with ScriptedServer(Script(ttft_s=0.01, gap_s=0.001, fault=fault)) as server:
        backend = backends(server.url, stall_timeout_s=0.3)
        out = _run(backend, [_request()])
        kind, text = out.outcome(0)
        assert kind == "error" and message in str(text) and server.url in str(text)
        assert "\n" not in str(text) and "hint:" in str(text)
        assert [k for k, _ in out.events[0]] == (["first", "error"] if first else ["error"])
        server.script.fault = None
        again = _run(backend, [_request()])
    assert again.events[0] == [("first", [100]), ("done", list(range(100, 108)))]


def test_concurrency_caps_what_the_server_sees(backends):
    with ScriptedServer(Script(ttft_s=0.05, gap_s=0.002, n_tokens=3)) as server:
        backend = backends(server.url, concurrency=5)
        out = _run(backend, [_request(i) for i in range(30)])
    assert not out.errors() and len(server.seen) == 30
    assert server.peak == 5


def test_a_thousand_streams_on_one_loop_thread(backends):
    with ScriptedServer(Script(ttft_s=0.2, gap_s=0.005, n_tokens=4)) as server:
        backend = backends(server.url, concurrency=1000)
        base = threading.active_count()
        peak = [base]
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(0.01):
                peak[0] = max(peak[0], threading.active_count() - 1)  # not the watcher itself

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            out = _run(backend, [_request(i) for i in range(1000)], timeout=60)
        finally:
            stop.set()
            watcher.join()
    assert not out.errors()
    assert all(out.outcome(i) == ("done", [100, 101, 102, 103]) for i in range(1000))
    assert server.peak > 500  # they were in flight together ...
    assert peak[0] - base <= 2  # ... without a thread each


def test_close_cancels_in_flight_and_waiting_requests_once(backends):
    with ScriptedServer(Script(ttft_s=30, n_tokens=2)) as server:
        backend = backends(server.url, concurrency=2)
        out = Outcomes()
        for i in range(5):
            backend.submit(_request(i), *out.callbacks(i))
        deadline = time.monotonic() + 5
        while len(server.seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        backend.close()
        assert time.monotonic() - started < 5
        out.wait(5, timeout=1)
        assert all(out.events[i] == [out.outcome(i)] and out.outcome(i)[0] == "error"
                   and "backend closed" in str(out.outcome(i)[1]) for i in range(5))
        assert not any(t.name == "openai-backend-loop" for t in threading.enumerate())
        later = Outcomes()
        backend.submit(_request(), *later.callbacks(0))
        assert later.events[0] == [("error", "backend closed")]
        backend.close()  # again: nothing left to do


def test_text_only_servers_need_the_tokenizer(backends, tmp_path):
    import_transformers()
    texts = [" ".join(f"t{i}" for i in range(100, 108))]
    tok_dir = make_tokenizer(tmp_path / "tok", texts)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tok_dir), local_files_only=True)
    with ScriptedServer(Script(ttft_s=0.01, gap_s=0.001, token_ids=False)) as server:
        out = _run(backends(server.url), [_request()])
        kind, text = out.outcome(0)
        assert kind == "error" and "streamed text but no token ids" in str(text)
        assert "tokenizer=DIR" in str(text)
        assert out.events[0][0][0] == "error"  # no empty first token before it
        out = _run(backends(server.url, tokenizer=str(tok_dir)), [_request()])
    whole = tok(texts[0], add_special_tokens=False)["input_ids"]
    assert len(whole) == 8 and tok.unk_token_id not in whole
    assert out.events[0] == [("first", whole[:1]), ("done", whole)]


def test_the_api_key_is_sent_and_never_shown(backends, monkeypatch):
    monkeypatch.setenv("MLH_TEST_OPENAI_KEY", "sk-never-shown")
    with ScriptedServer(Script(ttft_s=0.01, gap_s=0.001, n_tokens=2)) as server:
        backend = backends(server.url, api_key_env="MLH_TEST_OPENAI_KEY")
        assert _run(backend, [_request()]).outcome(0)[0] == "done"
        assert server.seen[0].headers["authorization"] == "Bearer sk-never-shown"
        server.script.fault = "500"
        errors = _run(backend, [_request()]).errors()
    shown = " ".join([str(backend.describe()), repr(backend), repr(vars(backend)),
                      str(backend.report()), *errors])
    assert errors and "sk-never-shown" not in shown
    assert backend.describe() == {
        "name": "openai", "endpoints": [server.url], "served_model": "served-m", "chat": False,
        "concurrency": "auto", "failover": False, "api_key_env": "MLH_TEST_OPENAI_KEY",
        "extensions": True, "chat_template": True, "tokenizer": None}


def test_options_are_checked_at_load():
    def load(**extra) -> OpenAIBackend:
        backend = OpenAIBackend()
        backend.load(None, BackendOptions(extra=backend_options(backend, extra)))
        return backend

    with pytest.raises(ConfigError, match="which model it serves .*is the server up there") as err:
        load(endpoints=["http://127.0.0.1:1"])  # nobody listens: the address, not the model
    assert err.value.hint == "start the server, or give --endpoint the address it listens on"
    with pytest.raises(ConfigError, match="endpoints is required"):
        load(served_model="m")
    with pytest.raises(ConfigError, match="is not http://HOST:PORT .https scheme"):
        load(endpoints=["https://example.invalid"], served_model="m")
    with pytest.raises(ConfigError, match="given twice"):
        load(endpoints="http://127.0.0.1:1,http://127.0.0.1:1/v1", served_model="m")
    with pytest.raises(ConfigError, match="unknown openai backend option: api_key"):
        load(endpoints=["http://127.0.0.1:1"], served_model="m", api_key="sk-x")
    with pytest.raises(ConfigError, match="tokenizer directory"):
        load(endpoints=["http://127.0.0.1:1"], served_model="m", tokenizer="/nonexistent/tok")
    with ExitStack() as stack:
        backend = load(endpoints="http://127.0.0.1:1/v1, http://127.0.0.2:2", served_model="m",
                       concurrency=3)
        stack.callback(backend.close)
        assert backend.describe()["endpoints"] == ["http://127.0.0.1:1", "http://127.0.0.2:2"]
        assert backend.concurrency == 3


def test_without_extensions_only_openai_keys_go_out(backends, tmp_path):
    """``extensions=false`` (transformers serve refuses keys OpenAI's API lacks with HTTP 422):
    no return_token_ids, min_tokens or top_k, the text tokenized; a stream without [DONE] that
    finished is complete. Refused without a tokenizer (the server sends no ids)."""
    import_transformers()
    texts = [" ".join(f"t{i}" for i in range(100, 108))]
    tok_dir = make_tokenizer(tmp_path / "tok", texts)
    with pytest.raises(ConfigError, match="tokenizer=DIR"):
        backends("http://127.0.0.1:1", extensions=False)
    script = Script(ttft_s=0.01, gap_s=0.001, token_ids=False, done=False)
    with ScriptedServer(script) as server:
        backend = backends(server.url, extensions=False, tokenizer=str(tok_dir))
        out = _run(backend, [_request(top_k=1, min_new_tokens=1)])
    assert out.outcome(0)[0] == "done" and len(out.outcome(0)[1]) == 8
    body = server.seen[-1].body
    assert not {"return_token_ids", "min_tokens", "top_k"} & set(body), body
    assert {"temperature", "top_p", "max_tokens", "stream"} <= set(body)
    assert backend.describe()["extensions"] is False
