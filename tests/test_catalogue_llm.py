"""Catalogue: the LLM runs under a hostile server and a careless user (issue 44).

* Results that can be trusted: a server's answer that breaks its request (more tokens than
  asked, ids that are not integers of the vocabulary, a token after the EOS token) ends the run
  with exit 3 and one line naming the endpoint, never a result; any streaming backend's answers
  are checked too; the task's max_new_tokens is bounded before anything runs.
* Secrets: a key the server echoes, and URL credentials, are in no file of the run, the index
  or the output; a key given where a variable's name belongs is refused without being shown.
* An endpoint client with bounds: each stall ends by the request's own deadline, each response
  beyond a bound fails at once in one line, memory bounded, parsing linear; endpoints that are
  no http URL are exit 2 before a run directory is made.

Each case asserts the exit code, the line, the record, and that nothing outside the run's folder
changed.
"""

from __future__ import annotations

import asyncio
import json
import resource
import time
from pathlib import Path
from typing import Any

import llm_fixtures as fx
import llm_server as hostile
import pytest
from catalogue_support import assert_clean_error, cli_subprocess, run_cli, snapshot
from llm_server import Script, ScriptedServer

from mlharness.backends.openai_sse import Bounds, SseResponse
from mlharness.backends.openai_stream import ClientSettings, EndpointError, OpenAIStreamClient
from mlharness.prompts import GenerationRequest
from mlharness.sut.stream import StreamEngine

VOCAB = 40  # the fixture tokenizer's ids: 0..39, [SEP] (3) its EOS


@pytest.fixture(scope="module")
def llm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 10-sample cnn_eval.json and a tokenizer directory (vocab.txt: VOCAB ids, EOS [SEP])."""
    root = tmp_path_factory.mktemp("llm")
    dataset = fx.write_cnn_dataset(root / "cnn_eval.json", fx.articles(10),
                                   lambda text: [7 + len(w) % 30 for w in text.split()])
    tok = root / "tok"
    tok.mkdir()
    words = [f"w{i}" for i in range(VOCAB - len(fx.SPECIALS))]
    (tok / "vocab.txt").write_text("\n".join(fx.SPECIALS + words) + "\n")
    (tok / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "BertTokenizer", "eos_token": "[SEP]"}))
    return {"dataset": dataset, "tokenizer": tok}


def _run(llm: dict[str, Path], url: str, capsys, *flags: str):
    return run_cli(["run", "-b", "llama3.1-8b", "--backend", "openai", "--endpoint", url,
                    "--backend-option", "served_model=tiny", "--dataset", llm["dataset"],
                    "--output-dir", "runs", "--no-progress", *flags], capsys)


def _record(root: Path) -> dict[str, Any]:
    found = list((root / "runs").rglob("run.json"))
    assert len(found) == 1, found
    return json.loads(found[0].read_text())


# ---- results that can be trusted -----------------------------------------------------------------

ACCURACY = ("-s", "Offline", "--mode", "accuracy")
HOSTILE = [
    # (id, the server's script, flags, what the one line says)
    ("more-tokens-than-asked", Script(ttft_s=0.01, gap_s=0, n_tokens=1000,
                                      ignore_max_tokens=True),
     ("-s", "Offline", "--target-qps", "5", "--warmup", "0", "--task-option",
      "max_new_tokens=8"), "streamed 9 tokens, more than the request's max_tokens 8"),
    ("ids-a-string", Script(ttft_s=0.01, chunks=["12345"]), ACCURACY,
     "streamed token_ids as str '12345', not a list of integers"),
    ("ids-beyond-the-vocabulary", Script(ttft_s=0.01, chunks=[[5], [VOCAB]]),
     (*ACCURACY, "--task-option", "tokenizer={tokenizer}"),
     f"token id {VOCAB} at position 0 is outside the vocabulary (0..{VOCAB - 1})"),
    ("eos-not-last", Script(ttft_s=0.01, chunks=[[5], [3], [6]]),
     (*ACCURACY, "--task-option", "tokenizer={tokenizer}"),
     "streamed tokens after the EOS token 3 (token 1 of the answer)"),
]


@pytest.mark.parametrize("case", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_an_answer_that_breaks_its_request_fails_the_run_naming_the_endpoint(
        case, llm, tmp_path: Path, capsys, monkeypatch) -> None:
    _, script, flags, said = case
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    with ScriptedServer(script) as server:
        result = _run(llm, server.url, capsys,
                      *(f.format(tokenizer=llm["tokenizer"]) for f in flags))
    text = result.out + result.err
    assert result.code == 3 and "Traceback" not in text, text
    record = _record(tmp_path)
    message = record["error"]["message"]
    assert record["status"] == "failed" and message.startswith(f"{server.url}/v1/completions")
    assert said in message and said in " ".join(text.split()), (message, text)
    assert "\n" not in message
    assert record.get("accuracy") is None and (record.get("result") or {}).get("valid") in (
        None, False)  # never a result, let alone VALID
    assert not list(tmp_path.rglob("accuracy.txt"))
    assert snapshot(tmp_path, skip=("runs",)) == before


class _Answers:
    """A streaming backend that answers every request with ``ids``."""

    name = "scripted"
    concurrency = 1

    def __init__(self, ids: list[Any]) -> None:
        self.ids = ids

    def submit(self, request, on_first, on_done, on_error) -> None:
        on_first(self.ids[:1])
        on_done(self.ids)


class _Task:
    def request(self, index: int) -> GenerationRequest:
        return GenerationRequest(input_ids=(1, 2), text=None, max_new_tokens=4)


@pytest.mark.parametrize(("ids", "said"), [
    ([1, 2, 3, 4, 5], "5 tokens for a request of at most 4"),
    ([1, 2.0], "token id 2.0 at position 1 is not an integer"),
    ([True], "token id True at position 0 is not an integer"),
    ([2**31], "outside int32"),
])
def test_any_streaming_backend_answering_against_its_request_fails_the_run(ids, said) -> None:
    """The streaming SUT checks every backend's answers (not only the openai client's): LoadGen
    never gets more tokens than asked or ids that are not int32, the sample is answered empty
    and the run ends as failed."""
    completed: list[tuple[int, bytes, int]] = []
    failures: list[str] = []
    engine = StreamEngine(_Task(), _Answers(ids), lambda rid, ids: None,  # type: ignore[arg-type]
                          lambda rid, payload, n: completed.append((rid, payload, n)),
                          failures.append)
    engine.issue([7, 8], [0, 1])
    assert len(failures) == 1 and said in failures[0] and "scripted backend" in failures[0]
    assert sorted(completed) == [(7, b"", 0), (8, b"", 0)]  # answered, empty: none waits
    assert engine.tokens == 0


# ---- bounds on the task's settings ---------------------------------------------------------------

@pytest.mark.parametrize("value", ["-1", "0", str(2**64 + 1), "129"])
def test_max_new_tokens_outside_1_to_the_reference_is_refused_before_anything_runs(
        value: str, llm, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    result = _run(llm, "http://127.0.0.1:9", capsys, "--task-option", f"max_new_tokens={value}")
    assert_clean_error(result, 2, f"max_new_tokens={value} is out of range: llama3.1-8b allows "
                                  "1..128")
    assert snapshot(tmp_path) == before and not (tmp_path / "runs").exists()


def test_max_new_tokens_within_the_bounds_is_what_the_server_is_asked(llm, tmp_path: Path,
                                                                      capsys,
                                                                      monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with ScriptedServer(Script(ttft_s=0.01, gap_s=0, n_tokens=4)) as server:
        result = _run(llm, server.url, capsys, *ACCURACY, "--task-option", "max_new_tokens=1",
                      "--max-samples", "2")
    assert server.seen and {s.body["max_tokens"] for s in server.seen} == {1}, result.err


# ---- secrets -------------------------------------------------------------------------------------

KEY = "sk-catalogue-0123456789abcdefSECRET"
PASSWORD = "pa55-w0rd-of-the-url"


def _files_holding(root: Path, *secrets: str) -> list[str]:
    """Every file under ``root`` (the run directories, the index and its WAL) whose bytes hold
    one of ``secrets``."""
    return [str(p) for p in root.rglob("*") if p.is_file()
            and any(s.encode() in p.read_bytes() for s in secrets)]


@pytest.mark.parametrize("fault", ["500", "error_event"])
def test_a_key_the_server_echoes_is_written_and_printed_nowhere(fault: str, llm,
                                                                tmp_path: Path) -> None:
    """The server echoes the request's Authorization header in its error (an HTTP 500 body, or
    an error object inside a 200 stream); the endpoint is given with credentials in its URL.
    Neither the key nor the password is in any file of the run directory, the result index,
    the CLI's stdout and stderr (the worker's included), the reproduce command or `runs`."""
    with ScriptedServer(Script(ttft_s=0.01, gap_s=0, n_tokens=4, fault=fault)) as server:
        url = server.url.replace("http://", f"http://user:{PASSWORD}@")
        proc = cli_subprocess(["run", "-b", "llama3.1-8b", "--backend", "openai", "--endpoint",
                               url, "--backend-option", "served_model=tiny", "--dataset",
                               llm["dataset"], "--output-dir", "runs", "--no-progress",
                               *ACCURACY], cwd=tmp_path, env_extra={"OPENAI_API_KEY": KEY})
        out, err = proc.communicate(timeout=180)
    assert server.seen[0].headers["authorization"] == f"Bearer {KEY}"  # it was sent
    assert proc.returncode == 3 and "Traceback" not in out + err, err
    said = "answered HTTP 500" if fault == "500" else "reported an error mid-stream"
    assert said in out + err and "you sent Bearer ***" in out + err  # the server's own words
    assert KEY not in out + err and PASSWORD not in out + err
    assert _files_holding(tmp_path, KEY, PASSWORD) == []
    record = _record(tmp_path)
    assert "you sent Bearer ***" in record["error"]["message"]
    assert record["spec"]["backend_option"]["endpoints"] == [
        url.replace(f"user:{PASSWORD}", "***")]
    listed = cli_subprocess(["runs", "--runs-dir", "runs"], cwd=tmp_path,
                            env_extra={"OPENAI_API_KEY": KEY})
    shown, shown_err = listed.communicate(timeout=60)
    assert listed.returncode == 0 and KEY not in shown + shown_err, shown_err
    assert PASSWORD not in shown + shown_err


@pytest.mark.parametrize("value", [KEY, "my key", "1PASSWORD", "OPENAI-API-KEY", "x" * 200])
def test_a_value_where_a_variable_name_belongs_is_refused_and_never_shown(
        value: str, llm, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    result = _run(llm, "http://127.0.0.1:9", capsys, "--backend-option",
                  f"api_key_env={value}")
    assert_clean_error(result, 2, "api_key_env takes the NAME of the environment variable")
    assert "export OPENAI_API_KEY=" in result.err and value not in result.out + result.err
    assert snapshot(tmp_path) == before and not (tmp_path / "runs").exists()


def test_logs_and_consoles_mask_registered_secrets_and_credentials(capsys, caplog) -> None:
    import logging

    from mlharness import redact
    from mlharness.cli.render import console_err

    redact.register(KEY)
    assert redact.scrub(f"x {KEY} y") == "x *** y"
    assert redact.scrub("http://u:p@h:1/v1 and Authorization: Bearer abcdefgh12") == \
        "http://***@h:1/v1 and Authorization: ***"
    assert redact.scrub('{"authorization": "Basic dXNlcjpwYXNzd29yZA=="}') == \
        '{"authorization": "***"}'
    assert redact.scrub("the standard bearer of basic rights") == \
        "the standard bearer of basic rights"  # words stay
    redact.guard_output()
    logging.getLogger("mlharness.test").error("the server said %s", KEY)
    try:
        raise RuntimeError(f"echoed {KEY}")
    except RuntimeError:
        logging.getLogger("mlharness.test").exception("failed")
    logged = "\n".join(caplog.handler.format(r) for r in caplog.records)
    assert KEY not in logged and logged.count("***") == 2, logged
    console_err.print(f"error: {KEY}")
    err = capsys.readouterr().err
    assert KEY not in err and "error: ***" in err, err


# ---- endpoints -----------------------------------------------------------------------------------

BAD_ENDPOINTS = [
    ("http://127.0.0.1:99999", "is not a URL (Port out of range 0-65535)"),
    ("http://[::1", "is not a URL (Invalid IPv6 URL)"),
    ("http://[::1:8000", "Invalid IPv6 URL"),
    ("http://127.0.0.1:0", "needs a port from 1 to 65535"),
    ("http://h:-1", "is not a URL (Port could not be cast to integer value as '-1')"),
    ("https://127.0.0.1:8000", "https is not supported"),
    ("ftp://127.0.0.1:21", "(ftp scheme"),
    ("http://:8000", "names no host"),
]


@pytest.mark.parametrize("benchmark", ["llama3.1-8b", "demo"])
@pytest.mark.parametrize(("url", "said"), BAD_ENDPOINTS, ids=[u for u, _ in BAD_ENDPOINTS])
def test_an_endpoint_that_is_no_http_url_is_refused_before_anything_runs(
        benchmark: str, url: str, said: str, llm, tmp_path: Path, capsys, monkeypatch) -> None:
    """The LLM server (--backend openai) and a serve node (remote) alike: exit 2 naming the
    problem, no run directory."""
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    if benchmark == "demo":
        result = run_cli(["run", "-b", "demo", "--endpoint", url, "--output-dir", "runs"],
                         capsys)
    else:
        result = _run(llm, url, capsys)
    assert_clean_error(result, 2, said)
    assert snapshot(tmp_path) == before and not (tmp_path / "runs").exists()


def test_a_serve_node_endpoint_needs_its_port(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_cli(["run", "-b", "demo", "--endpoint", "http://u:secretpass@10.0.0.2",
                      "--output-dir", "runs"], capsys)
    assert_clean_error(result, 2, "--endpoint 'http://***@10.0.0.2' needs a port")
    assert "secretpass" not in result.err and not (tmp_path / "runs").exists()


# ---- an endpoint client with bounds --------------------------------------------------------------

def _complete(act, **settings) -> tuple[str, float]:
    """One request of the streaming client to a server answering with ``act``: the error's
    one line (with its hint) and the process's peak RSS growth in MB."""
    settings.setdefault("stall_timeout_s", 1.0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with ScriptedServer(Script(act=act)) as server:
        client = OpenAIStreamClient(ClientSettings(base_url=server.url, model="m", **settings))
        with pytest.raises(EndpointError) as err:
            asyncio.run(client.complete([1, 2], max_tokens=64))
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    message = err.value.message
    assert message.startswith(f"{server.url}/v1/completions ") and "\n" not in message
    return f"{message} (hint: {err.value.hint})", grown


STALLS = [
    # (id, the server's answer, what the line says)
    ("accepts-and-never-answers", hostile.silent,
     "stalled: no progress for 1 s while waiting for the response (nothing came)"),
    ("drips-a-byte-every-0.1-s", hostile.drip(0.1),
     "stalled: no progress for 1 s while waiting for the first token ("),
    ("a-ping-comment-for-ever", hostile.endless(b": ping\n\n"),
     "bytes trickled in, no whole event)"),
    ("429-and-the-connection-held", hostile.held_429,
     "answered HTTP 429: {\"error\": {\"message\": \"slow down\""),
]


@pytest.mark.parametrize("case", STALLS, ids=[c[0] for c in STALLS])
def test_each_stall_ends_by_the_requests_own_deadline_naming_the_endpoint(case) -> None:
    """Each ends within the client's own bound (stall_timeout_s, or 2 s for a refusal's body),
    long before the run's 60 s stall clock, with one line naming the endpoint and what it
    did; the bytes that trickled in are bounded by that time."""
    _, act, said = case
    message, grown = _complete(act)
    assert said in message, message
    if "drips" in case[0]:
        assert "bytes trickled in, no whole event)" in message
    assert grown < 64, grown


def test_the_clients_deadlines_come_before_the_runs_stall_clock() -> None:
    from mlharness.backends.openai import OpenAIOptions
    from mlharness.spec import RunSpec

    opts = OpenAIOptions(endpoints=["http://127.0.0.1:1"])
    run_stall = RunSpec(benchmark="demo").stall_timeout
    assert opts.stall_timeout_s + opts.connect_timeout_s < run_stall == 60
    assert ClientSettings(base_url="http://h:1", model="m").stall_timeout_s == \
        opts.stall_timeout_s == 30


BOUNDS = [
    ("a-100-MB-event", hostile.huge_line(100),
     "sent a line (an event) of more than 1 MiB after 0 tokens"),
    ("endless-events-without-a-token", hostile.endless(b'data: {"choices": []}\n\n'),
     "streamed 65 events without a token (after 0 tokens): an endless stream"),
    ("endless-headers", hostile.endless_headers,
     "sent more than 64 KiB of status and headers"),
    ("endless-chunk-header", hostile.raw(hostile.OK_HEAD + b"1" * 5000),
     "sent a chunk header of more than 1024 bytes"),
    ("status-line-with-a-superscript-digit", hostile.raw(b"HTTP/1.1 \xc2\xb200 OK\r\n\r\n"),
     "sent no HTTP response ('HTTP/1.1 Â²00 OK')"),
    ("status-line-only-then-close", hostile.raw(b"HTTP/1.1 \xc2\xb200 OK\r\n"),
     "sent no HTTP response"),
    ("token-id-beyond-int32", hostile.raw(hostile.OK_HEAD + hostile.chunk(
        b'data: {"choices": [{"text": "x", "token_ids": [2147483648]}]}\n\n')),
     "token id 2147483648 at position 0 is outside int32"),
    ("token-ids-an-int", hostile.raw(hostile.OK_HEAD + hostile.chunk(
        b'data: {"choices": [{"text": "x", "token_ids": 7}]}\n\n')),
     "streamed token_ids as int 7, not a list of integers"),
    ("logprobs-content-of-ints", hostile.raw(hostile.OK_HEAD + hostile.chunk(
        b'data: {"choices": [{"text": "x", "logprobs": {"tokens": 5}}]}\n\n')),
     "sent a response this client cannot read (TypeError"),
    ("an-error-object-in-a-200-stream", hostile.raw(hostile.OK_HEAD + hostile.chunk(
        b'data: {"object": "error", "message": "out of KV cache", "code": 500}\n\n')),
     "reported an error mid-stream after 0 tokens: out of KV cache"),
]


@pytest.mark.parametrize("case", BOUNDS, ids=[c[0] for c in BOUNDS])
def test_a_response_beyond_its_bounds_fails_at_once_in_one_line(case, capfd) -> None:
    """No traceback, no "Exception in callback" from the event loop, memory bounded (a 100 MB
    event costs the 1 MiB bound, not 593 MB)."""
    _, act, said = case
    started = time.monotonic()
    message, grown = _complete(act, stall_timeout_s=30.0)
    assert said in message, message
    assert time.monotonic() - started < 20  # at once: never the 30 s stall guard
    assert grown < 64, grown
    printed = capfd.readouterr()
    assert "Traceback" not in printed.err + printed.out and "Exception" not in printed.err


def test_bounds_are_options_a_user_can_raise() -> None:
    """A 2 MiB event passes with max_event_bytes raised (and fails without)."""
    with ScriptedServer(Script(act=hostile.huge_line(2))) as server:
        client = OpenAIStreamClient(ClientSettings(base_url=server.url, model="m",
                                                   max_event_bytes=4 << 20))
        result = asyncio.run(client.complete([1], max_tokens=4))
    assert result.n_tokens == 0 and result.finish_reason is None  # the event held no choices


@pytest.mark.parametrize("megabytes", [10, 40])
def test_a_long_line_costs_work_linear_in_its_length(megabytes: int) -> None:
    """Bytes copied to assemble a line that arrives in 64 KiB reads: at most twice its length,
    whatever its length (quadratic joining copied 10 MB lines 80x over, 40 MB ones 320x)."""
    size = megabytes << 20
    body = b'data: {"x": "' + b"x" * size + b'"}\n\n'
    response = _fed(body, 65536, max_event_bytes=size + 1024)
    assert response.copied <= 2 * len(body), response.copied / len(body)
    assert not response.done.done()  # read whole, waiting for the next event


def _fed(body: bytes, step: int, **bounds) -> SseResponse:
    class Guard:
        what, trickled = "", 0

        def touch(self) -> None:
            pass

    class Transport:
        def close(self) -> None:
            pass

    async def main() -> SseResponse:
        response = SseResponse("http://x/v1/completions", False, Guard(), lambda *a: None,
                               bounds=Bounds(**bounds))
        response.connection_made(Transport())  # type: ignore[arg-type]
        head = b"HTTP/1.1 200 OK\r\n\r\n"
        response.data_received(head)
        view = memoryview(body)
        for i in range(0, len(body), step):
            response.data_received(bytes(view[i:i + step]))
        return response

    return asyncio.run(main())


RUN_STALLS = [
    ("accepts-and-never-answers", hostile.silent, "stalled: no progress for 2 s while waiting "
                                                  "for the response (nothing came)"),
    ("drips-a-byte-every-0.2-s", hostile.drip(0.2), "bytes trickled in, no whole event)"),
    ("a-100-MB-event", hostile.huge_line(100), "sent a line (an event) of more than 1 MiB"),
]


@pytest.mark.parametrize("case", RUN_STALLS, ids=[c[0] for c in RUN_STALLS])
def test_a_run_against_a_stalling_server_ends_with_the_clients_line(case, llm, tmp_path: Path,
                                                                   capsys, monkeypatch) -> None:
    """The request's own deadline (here 2 s) ends the run before the run's stall clock (here
    6 s) with one line naming the endpoint, not "no sample loaded or completed"."""
    _, act, said = case
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    with ScriptedServer(Script(act=act)) as server:
        result = _run(llm, server.url, capsys, *ACCURACY, "--stall-timeout", "6",
                      "--backend-option", "stall_timeout_s=2")
    text = result.out + result.err
    assert result.code == 3 and "Traceback" not in text, text
    message = _record(tmp_path)["error"]["message"]
    assert message.startswith(f"{server.url}/v1/completions") and said in message, message
    assert "no sample loaded or completed" not in text
    assert snapshot(tmp_path, skip=("runs",)) == before
