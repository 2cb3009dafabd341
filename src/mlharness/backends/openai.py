"""The ``openai`` backend: text generation by OpenAI-compatible servers (vLLM, SGLang, TGI,
llama.cpp's server, ``transformers serve``), streamed token by token (the StreamingBackend of
:mod:`mlharness.backends.base`).

One asyncio event loop on one daemon thread runs every request as a coroutine of
:class:`~mlharness.backends.openai_stream.OpenAIStreamClient` (no thread per request);
``submit`` queues the request for it and returns (a burst of submits wakes the loop once, with
``call_soon_threadsafe``). A
limit keeps at most ``concurrency`` requests on the wire in total (a number, or ``auto``: measured
by :mod:`~mlharness.backends.openai_admit` when LoadGen issues everything at once, none when it
paces the queries); the rest wait, in order. Each endpoint keeps a pool of keep-alive
connections (:mod:`~mlharness.backends.openai_pool`), pre-warmed before the test as
``issue_pattern`` learns the load: as many as the requests expected in flight (the limit; paced
queries: LoadGen's target QPS times the warm-up's request time, with a margin), shared among the
endpoints; run.json's ``stream_report`` counts the connections opened and reused.
Each request goes to the endpoint with the fewest outstanding requests (on a tie, the one sent
the fewest so far, so requests sent one at a time take turns), as the remote pool of
:mod:`mlharness.distributed.pool` dispatches. An endpoint that failed a request before its first
token is passed over for ``RESTING_S`` while another is not. With ``failover`` such a request
is sent once more, to another endpoint; a failure after the first token is the request's error
(its first token is already reported).

The callbacks run on the loop's thread: ``on_first`` once (the first chunk's ids), then
``on_done`` (every output id) or ``on_error`` (one line naming the endpoint). A server that
streams text without token ids needs ``tokenizer`` (a local Hugging Face tokenizer directory):
the text is tokenized, without special tokens, the first chunk's for ``on_first`` and the whole
output's for ``on_done``.

A request that carries audio (whisper) goes to ``/v1/audio/transcriptions`` instead
(:meth:`~mlharness.backends.openai_stream.OpenAIStreamClient.transcribe`, within the same
bounds); its answer is the transcript with the server's token count,
``Generated([], text=..., n_tokens=...)``.

An endpoint named by IP address (``http://127.0.0.1:8000``) needs no name lookup; a host name
is looked up for every request, on asyncio's small thread pool.

Without ``served_model`` the backend asks each endpoint ``GET /v1/models`` at load and takes
the one model they all serve (several, or none: an error naming them); its description's notes
say so. A request with chat messages only (a multimodal one) goes to ``/v1/chat/completions``
whatever ``chat`` says, and one with ``server_sampling`` carries no sampling key. The answer's
text comes back with its ids (:class:`~mlharness.prompts.Generated`).

The API key is read from ``$api_key_env`` by the client and appears in no description, ``repr``
or message.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import Field, field_validator

from mlharness.backends.base import (BackendOptions, GenerationRequest, IssuePattern, OnDone,
                                    OnError, OnFirst, StreamingBackend)
from mlharness.backends.openai_admit import Admission, paced_connections
from mlharness.backends.openai_stream import (ClientSettings, EndpointError, OpenAIStreamClient,
                                              TextTokenizer)
from mlharness.distribution import check_endpoint
from mlharness.errors import ConfigError, HarnessError, one_line
from mlharness.hostinfo import spare_descriptors
from mlharness.options import Options, RuleError
from mlharness.prompts import Generated
from mlharness.redact import register_env, register_url, scrub
from mlharness.tensors import TensorSpec

log = logging.getLogger(__name__)

#: seconds an endpoint that failed a request before its first token is passed over by dispatch
#: (while another endpoint is not): a dead server costs a refused connection now and then, not
#: half the requests
RESTING_S = 1.0
OBSERVE_S = 0.25  # how often the concurrency search (auto) looks at the servers
CLOSED = "backend closed"


class OpenAIOptions(Options):
    """``--backend-option`` keys of the openai backend."""

    #: base URLs (``http://host:port``; a trailing ``/v1`` is dropped); a comma-separated text
    #: is split
    endpoints: list[str] = Field(min_length=1)
    #: the model name the server knows (``"model"`` of each request); empty: the one model
    #: ``GET /v1/models`` lists
    served_model: str = ""
    chat: bool = False  # /v1/chat/completions (the request's messages, or its text as one)
    api_key_env: str = "OPENAI_API_KEY"  # the environment variable holding the key
    #: requests in flight over all endpoints: a number, or auto (Offline: measured, from 8,
    #: doubled while that streams more, up to max_concurrency; Server and Interactive: no
    #: limit; backends/openai_admit.py)
    concurrency: int | Literal["auto"] = "auto"
    #: auto's ceiling in Offline; under paced queries the connections opened before the test
    #: when no target QPS or warm-up time sizes them
    max_concurrency: int = Field(default=256, ge=1)
    failover: bool = False  # a request failed before its first token is sent once elsewhere
    tokenizer: Path | None = None  # for servers that stream text without token ids
    #: send vLLM's request keys (``return_token_ids``, ``min_tokens``, ``top_k``); false for a
    #: server that refuses keys OpenAI's API lacks (``transformers serve`` answers 422), which
    #: then gets only ``temperature`` and ``top_p`` of the sampling, and needs ``tokenizer``
    extensions: bool = True
    #: with chat: send the benchmark's reference chat template with the messages where it has
    #: one (llama3.1-8b: the BOS and the prompt, so the server's prompt is tok_input; vLLM needs
    #: --trust-request-chat-template); false, or without extensions: the server's own template
    chat_template: bool = True
    #: seconds without a whole header block or event before a request is stalled: below the
    #: run's --stall-timeout (60 s), so the request's own line, naming the endpoint, comes first
    stall_timeout_s: float = Field(default=30.0, gt=0)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    #: bytes of one line of a response body (an SSE event), and of its status and headers
    max_event_bytes: int = Field(default=1 << 20, ge=1024)
    max_header_bytes: int = Field(default=64 << 10, ge=1024)

    @field_validator("endpoints", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [part for part in value.split(",") if part.strip()]
        if isinstance(value, (list, tuple)):
            value = [_base_url(str(v)) for v in value]
            if len(set(value)) != len(value):
                raise RuleError(f"an endpoint is given twice: {scrub(', '.join(value))}",
                                "list each server once")
        return value

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        """A variable's NAME: a key given here by mistake is refused, and never shown."""
        if value and not ENV_NAME.fullmatch(value):
            raise RuleError("api_key_env takes the NAME of the environment variable that holds "
                            "the API key (letters, digits and _, not starting with a digit); "
                            "the value given is not one, perhaps the key itself (not shown)",
                            "export OPENAI_API_KEY=<key> and leave api_key_env out, or give "
                            "--backend-option api_key_env=YOUR_VARIABLE")
        return value

    def model_post_init(self, context: Any) -> None:
        """This process masks the key and the endpoints' credentials wherever it writes."""
        register_env(self.api_key_env)
        for url in self.endpoints:
            register_url(url)


#: an environment variable's name (POSIX: letters, digits, underscore; no leading digit)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _base_url(url: str) -> str:
    url = check_endpoint(url).rstrip("/")
    if "://" not in url:
        url = f"http://{url}"
    return url[: -len("/v1")] if url.endswith("/v1") else url


class _Endpoint:
    """One server: its client and what dispatch knows of it (touched on the loop only)."""

    __slots__ = ("url", "client", "outstanding", "sent", "failed", "resting_until")

    def __init__(self, client: OpenAIStreamClient) -> None:
        self.url = client.url  # without credentials
        self.client = client
        self.outstanding = 0
        self.sent = 0
        self.failed = 0
        self.resting_until = 0.0


class _Call:
    """One submitted request and its callbacks."""

    __slots__ = ("request", "on_first", "on_done", "on_error", "first_sent", "task")

    def __init__(self, request: GenerationRequest, on_first: OnFirst, on_done: OnDone,
                 on_error: OnError) -> None:
        self.request = request
        self.on_first, self.on_done, self.on_error = on_first, on_done, on_error
        self.first_sent = False
        self.task: asyncio.Task[None] | None = None  # held here: the loop keeps weak references


def _safely(callback: Callable[[Any], None], value: Any) -> None:
    try:
        callback(value)
    except Exception:  # noqa: BLE001 - the caller's bug must not stop the other requests
        log.exception("an openai backend callback raised")


def _line(exc: BaseException) -> str:
    if isinstance(exc, HarnessError):
        text = exc.message + (f" (hint: {exc.hint})" if exc.hint else "")
        return " ".join(text.split())
    return one_line(exc)


class OpenAIBackend(StreamingBackend):
    """StreamingBackend for OpenAI-compatible servers; ``model`` is ignored (the server has it)."""

    name = "openai"
    concurrency = 256
    options_model = OpenAIOptions

    def __init__(self) -> None:
        self.options: OpenAIOptions | None = None
        self._endpoints: list[_Endpoint] = []
        self._tokenize: TextTokenizer | None = None
        #: the tokenizer option's vocabulary size and EOS id (a task's tokenizer comes first)
        self._vocab_size: int | None = None
        self._eos_id: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._admission: Admission | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._lock = threading.Lock()
        self._live: set[_Call] = set()  # unfinished calls
        #: calls submitted and not yet started on the loop: a burst of submits wakes the loop
        #: once (one self-pipe write and one loop turn), not once per call
        self._inbox: list[_Call] = []
        self._wake_pending = False
        self._closed = False
        self.failovers = 0
        self.notes: list[str] = []

    def __repr__(self) -> str:
        urls = [e.url for e in self._endpoints]
        return f"OpenAIBackend(endpoints={urls})"

    # -- setup ------------------------------------------------------------------------------

    def load(self, model: Path | None, options: BackendOptions) -> None:
        """Check the options, make one client per endpoint and start the event loop. Nothing is
        sent: a server may be slow to answer before its first request."""
        opts = options.extra_as(OpenAIOptions)
        if not opts.extensions and opts.tokenizer is None:
            raise ConfigError("without extensions the server is not asked for token ids, so "
                              "its text must be tokenized here",
                              "give --backend-option tokenizer=DIR (the model's tokenizer)")
        self.notes = []
        if not opts.served_model:
            served = _served_model(opts.endpoints, opts.api_key_env, opts.connect_timeout_s)
            opts = opts.model_copy(update={"served_model": served})
            self.notes.append(f"served model {served!r}: the one model GET /v1/models lists at "
                              + ", ".join(opts.endpoints))
        self._endpoints = [_Endpoint(OpenAIStreamClient(ClientSettings(
            base_url=url, model=opts.served_model, api_key_env=opts.api_key_env or None,
            connect_timeout_s=opts.connect_timeout_s, stall_timeout_s=opts.stall_timeout_s,
            max_event_bytes=opts.max_event_bytes, max_header_bytes=opts.max_header_bytes,
            token_ids=opts.extensions)))
            for url in opts.endpoints]
        if opts.tokenizer:
            self._tokenize, self._vocab_size, self._eos_id = _tokenizer(opts.tokenizer)
        self.options = opts
        given = opts.concurrency if isinstance(opts.concurrency, int) else None
        if given is not None and given < 1:
            raise ConfigError(f"--backend-option concurrency={given} is not a positive number",
                              "give a number of requests, or auto (measured)")
        self.concurrency = given or opts.max_concurrency
        self._start_loop(Admission(given, opts.max_concurrency))

    def _start_loop(self, admission: Admission) -> None:
        loop = _new_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            self._admission = admission
            if self._admission.measured:
                self._timer = loop.call_later(OBSERVE_S, self._observe)
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="openai-backend-loop", daemon=True)
        self._thread.start()
        ready.wait()
        self._loop = loop

    @property
    def inputs(self) -> list[TensorSpec] | None:
        return None  # no model here: the server has it

    def sends(self, request: GenerationRequest) -> str | None:
        """The prompt's form and where it goes (run.json's backend ``prompt``)."""
        if self.options is None:
            return None
        opts = self.options
        if request.audio is not None:
            return "audio as a multipart form to /v1/audio/transcriptions"
        chat = _chat(request, opts)
        try:
            _prompt(request, chat)
        except _Unsendable as exc:  # refused before the run: exit 2, nothing sent
            message, _, hint = str(exc).partition(" (hint: ")
            raise ConfigError(message, hint.rstrip(")")) from None
        if not chat:
            form = ("token ids" if request.input_ids is not None
                    else "text" if request.text is not None else "nothing")
            return f"{form} to /v1/completions"
        form = ("the reference's chat messages" if request.messages
                else "the text as a user message" if request.text is not None else "nothing")
        template = ("with the benchmark's reference chat template"
                    if _reference_template(request, opts) else "with the server's chat template")
        return f"{form} to /v1/chat/completions, {template}"

    def describe(self) -> dict[str, Any]:
        """The settings, never the API key (only the variable's name)."""
        opts = self.options
        if opts is None:
            return {"name": self.name}
        return {"name": self.name, "endpoints": list(opts.endpoints),
                "served_model": opts.served_model, "chat": opts.chat,
                "concurrency": opts.concurrency, "failover": opts.failover,
                "api_key_env": opts.api_key_env, "extensions": opts.extensions,
                "chat_template": opts.chat_template,
                "tokenizer": str(opts.tokenizer) if opts.tokenizer else None,
                **({"notes": list(self.notes)} if self.notes else {})}

    def report(self) -> dict[str, Any]:
        """Requests sent to and failed by each endpoint, failovers, how the concurrency was
        chosen, the connections opened and reused by each endpoint, and (``bound``) the
        client-side limit that held paced queries back, if one did."""
        admission = self._admission
        report = {"sent": {e.url: e.sent for e in self._endpoints},
                  "failed": {e.url: e.failed for e in self._endpoints},
                  "failovers": self.failovers,
                  "concurrency": admission.report() if admission else None,
                  "connections": {e.url: e.client.pool.report() for e in self._endpoints}}
        bound = admission.bound() if admission else None
        if bound:
            report["bound"] = bound
        return report

    def issue_pattern(self, pattern: IssuePattern) -> None:
        """auto: measured when LoadGen issues everything at once (Offline: a flood a slow server
        must not get); paced queries (Server, Interactive, SingleStream) go out as they come,
        with no limit (a limit would only add its queue to their TTFT). Then, before the test,
        each endpoint's pool opens its share of the connections expected in flight: the limit,
        or for paced queries :func:`~mlharness.backends.openai_admit.paced_connections`."""
        admission, loop = self._admission, self._loop
        if admission is None or loop is None or self._closed:
            return
        wait_s = 2 * (self.options.connect_timeout_s if self.options else 10.0)
        if not pattern.all_at_once:
            admission.pace(*paced_connections(pattern, admission.cap, spare_descriptors()))

        async def prewarm() -> None:
            share = -(-admission.expected // max(1, len(self._endpoints)))
            await asyncio.gather(*(e.client.prewarm(share) for e in self._endpoints))

        try:
            asyncio.run_coroutine_threadsafe(prewarm(), loop).result(wait_s)
        except Exception:  # noqa: BLE001 - a server that refuses them says so at its request
            log.info("pre-warming the openai backend's connections failed", exc_info=True)

    def progress(self) -> int:
        """Events streamed so far by every endpoint (each request's header block and events):
        the run's stall clock counts them as progress."""
        return sum(e.client.activity.events for e in self._endpoints)

    def _observe(self) -> None:
        """On the loop, every OBSERVE_S: the concurrency search looks at the servers."""
        admission = self._admission
        if admission is None or self._closed or self._loop is None:
            return
        activity = [e.client.activity for e in self._endpoints]
        admission.observe(self._loop.time(), sum(a.events for a in activity),
                          sum(a.first_tokens for a in activity))
        if admission.measured and admission.settled is None:
            self._timer = self._loop.call_later(OBSERVE_S, self._observe)

    # -- requests ---------------------------------------------------------------------------

    def submit(self, request: GenerationRequest, on_first: OnFirst, on_done: OnDone,
               on_error: OnError) -> None:
        """Queue ``request`` on the event loop and return. Before ``load`` or after ``close``:
        ``on_error("backend closed")`` at once, on the caller's thread."""
        call = _Call(request, on_first, on_done, on_error)
        with self._lock:
            running = not self._closed and self._loop is not None
            if running:
                assert self._loop is not None
                self._live.add(call)
                self._inbox.append(call)
                if not self._wake_pending:
                    self._wake_pending = True
                    self._loop.call_soon_threadsafe(self._start_submitted)
        if not running:
            on_error(CLOSED)

    def _start_submitted(self) -> None:
        """On the loop: a task for each call submitted since the last turn, in order (no
        concurrent future to chain, as ``run_coroutine_threadsafe`` makes, for a result nobody
        waits for)."""
        assert self._loop is not None
        with self._lock:
            calls, self._inbox, self._wake_pending = self._inbox, [], False
        for call in calls:
            call.task = self._loop.create_task(self._run(call))

    def _finish(self, call: _Call, ids: list[int] | None, error: str | None) -> None:
        """``on_done(ids)`` or ``on_error(error)``, once per call whoever calls this."""
        with self._lock:
            if call not in self._live:
                return
            self._live.remove(call)
        call.task = None  # the task holds the call: no cycle left for the collector
        if error is not None:
            _safely(call.on_error, error)
        else:
            if not call.first_sent:  # a server that streamed no token: on_first still comes
                call.first_sent = True
                _safely(call.on_first, [])
            _safely(call.on_done, ids)

    async def _run(self, call: _Call) -> None:
        assert self._admission is not None
        try:
            await self._admission.acquire()
            try:
                await self._send(call)
            finally:
                self._admission.open()  # ended without a token: the next may go all the same
                self._admission.release()
        except asyncio.CancelledError:
            self._finish(call, None, f"{CLOSED} while the request was in flight")
            raise
        except Exception as exc:  # noqa: BLE001 - a bug here must still answer the request
            self._finish(call, None, f"openai backend failed a request: {_line(exc)}")

    def _pick(self, avoid: _Endpoint | None) -> _Endpoint:
        now = time.monotonic()
        choices = [e for e in self._endpoints if e is not avoid] or self._endpoints
        return min(choices, key=lambda e: (e.resting_until > now, e.outstanding, e.sent))

    async def _send(self, call: _Call) -> None:
        assert self.options is not None
        opts, request = self.options, call.request
        chat = _chat(request, opts)
        try:
            prompt = None if request.audio is not None else _prompt(request, chat)
        except _Unsendable as exc:
            self._finish(call, None, str(exc))
            return
        body: dict[str, Any] = {"temperature": request.temperature, "top_p": request.top_p}
        if request.server_sampling:  # no key at all: the client's default temperature too
            body = {"temperature": None}
        elif opts.extensions:
            body["min_tokens"] = request.min_new_tokens
            if request.top_k != -1:  # -1: no limit, the server's default (vLLM: -1 or 0)
                body["top_k"] = request.top_k
        if _reference_template(request, opts):
            body["chat_template"] = request.chat_template

        def first(ids: list[int], _ttft: float) -> None:
            call.first_sent = True
            if self._admission is not None:
                self._admission.open()
            _safely(call.on_first, ids)

        endpoint = self._pick(None)
        earlier: str | None = None
        while True:
            endpoint.outstanding += 1
            endpoint.sent += 1
            try:
                if prompt is None:  # speech to text: /v1/audio/transcriptions
                    result = await endpoint.client.transcribe(
                        request.audio or b"", request.max_new_tokens, on_first_token=first,
                        language="en", response_format="json",
                        temperature=f"{request.temperature:g}")
                else:
                    result = await endpoint.client.complete(
                        prompt, request.max_new_tokens, on_first_token=first, chat=chat,
                        tokenize=self._tokenize,
                        vocab_size=request.vocab_size or self._vocab_size,
                        eos_token_id=(request.eos_token_id if request.eos_token_id is not None
                                      else self._eos_id), **body)
            except (EndpointError, OSError) as exc:
                endpoint.failed += 1
                why = _line(exc) if isinstance(exc, EndpointError) else \
                    f"{endpoint.url}: {one_line(exc)}"
                if call.first_sent:
                    self._finish(call, None, why)
                    return
                endpoint.resting_until = time.monotonic() + RESTING_S
                if opts.failover and earlier is None and len(self._endpoints) > 1:
                    self.failovers += 1
                    earlier = why
                    endpoint = self._pick(endpoint)
                    continue
                if earlier is not None:
                    why = f"{why}; sent there after {earlier}"
                self._finish(call, None, why)
                return
            finally:
                endpoint.outstanding -= 1
            endpoint.resting_until = 0.0
            # the ids (none from a transcription), the text, and the count (the server's for
            # a transcription)
            self._finish(call, Generated(result.token_ids, text=result.text,
                                         n_tokens=result.n_tokens), None)
            return

    # -- shutdown ---------------------------------------------------------------------------

    def close(self) -> None:
        """Cancel what is in flight or waiting (each gets ``on_error`` once), stop the loop and
        join its thread. Later submits get ``on_error("backend closed")``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is not None and thread is not None:
            async def cancel_all() -> None:
                me = asyncio.current_task()
                tasks = [t for t in asyncio.all_tasks() if t is not me]
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                for endpoint in self._endpoints:
                    endpoint.client.pool.close()

            try:
                asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(30)
            except Exception:  # noqa: BLE001 - a stuck loop is stopped below all the same
                log.exception("cancelling the openai backend's requests failed")
            loop.call_soon_threadsafe(loop.stop)
            thread.join(30)
            if not thread.is_alive():
                loop.close()
        # requests cancelled before their coroutine ever ran never reached its handler
        with self._lock:
            left = list(self._live)
        for call in left:
            self._finish(call, None, CLOSED)


#: the most of a ``GET /v1/models`` answer read (a server's model list is a few hundred bytes)
MODEL_LIST_MAX_BYTES = 1 << 20


def _served_model(urls: list[str], api_key_env: str, timeout_s: float) -> str:
    """The one model every endpoint lists at ``GET /v1/models`` (an OpenAI list: ``data`` of
    ``{"id": ...}``); ConfigError when one cannot say, or they do not list exactly one."""
    hint = "give --backend-option served_model=NAME (the server's model id)"
    key = os.environ.get(api_key_env, "") if api_key_env else ""
    found: dict[str, list[str]] = {}
    for url in urls:
        ask = urllib.request.Request(f"{url}/v1/models", headers={"Accept": "application/json"})
        if key:
            ask.add_header("Authorization", f"Bearer {key}")
        try:
            with urllib.request.urlopen(ask, timeout=timeout_s) as answer:
                raw = answer.read(MODEL_LIST_MAX_BYTES + 1)
            if len(raw) > MODEL_LIST_MAX_BYTES:
                raise ValueError(f"over {MODEL_LIST_MAX_BYTES} bytes")
            found[url] = [m["id"] for m in json.loads(raw)["data"]]
            if not all(isinstance(m, str) and 0 < len(m) <= 256 and m.isprintable()
                       for m in found[url]):
                raise ValueError("a model id that is not a short printable text")
        except urllib.error.HTTPError as exc:  # up, but no model list (an OSError too)
            raise ConfigError(f"{url}/v1/models answered HTTP {exc.code}: the server does not "
                              "say which model it serves", hint) from exc
        except OSError as exc:  # nobody answered: naming the model would not help
            raise ConfigError(f"cannot ask {url}/v1/models which model it serves "
                              f"({one_line(exc, 160)}); is the server up there?",
                              "start the server, or give --endpoint the address it listens "
                              "on") from exc
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{url}/v1/models is not an OpenAI model list "
                              f"({one_line(exc, 160)})", hint) from exc
    models = sorted({m for ids in found.values() for m in ids})
    if len(models) != 1 or any(ids != models for ids in found.values()):
        listed_text = "; ".join(f"{u}: {', '.join(ids) or 'none'}" for u, ids in found.items())
        raise ConfigError(f"the servers do not serve exactly one model ({listed_text})", hint)
    return models[0]


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop where it is installed (libuv reads the sockets and calls the stream's
    ``data_received`` from C: about half asyncio's CPU a token), else asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class _Unsendable(Exception):
    """A request this backend's settings cannot send (the message says why)."""


def _chat(request: GenerationRequest, opts: OpenAIOptions) -> bool:
    """Whether the request goes to /v1/chat/completions: chat=true, or a request that has only
    messages (qwen3-vl's picture and text)."""
    return opts.chat or (request.messages is not None and request.input_ids is None
                         and request.text is None)


def _reference_template(request: GenerationRequest, opts: OpenAIOptions) -> bool:
    """Whether a chat request carries the benchmark's reference chat template (an extension
    key: vLLM's, with --trust-request-chat-template)."""
    return bool(_chat(request, opts) and opts.extensions and opts.chat_template
                and request.messages and request.chat_template)


def _prompt(request: GenerationRequest, chat: bool) -> str | list[int] | list[dict[str, Any]]:
    """What the request sends: messages (chat: the reference's, else the text as the user's
    message), token ids or text."""
    if chat:
        if request.messages:
            return [dict(m) for m in request.messages]
        if request.text is not None:
            return [{"role": "user", "content": request.text}]
        raise _Unsendable("a chat request needs text or messages, and this benchmark's data set "
                          "gives token ids only (its reference sends them to the server as ids; "
                          "hint: leave --backend-option chat=true out: the ids then go to "
                          "/v1/completions)")
    if request.input_ids is not None:
        return list(request.input_ids)
    if request.text is not None:
        return request.text
    raise _Unsendable("the request has neither token ids nor text (hint: with messages only, "
                      "give --backend-option chat=true)")


def _tokenizer(directory: Path) -> tuple[TextTokenizer, int, int | None]:
    """text -> ids by the Hugging Face tokenizer in ``directory`` (nothing downloaded), without
    special tokens: the server's output text, as its token ids would have been; and the
    tokenizer's vocabulary size (added tokens included) and EOS id."""
    if not Path(directory).is_dir():
        raise ConfigError(f"tokenizer directory {directory} not found",
                          "give the model checkpoint's directory (tokenizer files included)")
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise ConfigError("the openai backend's tokenizer option needs transformers",
                          "pip install 'mlharness[llm]'") from exc
    try:
        tok = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load the tokenizer in {directory}: {one_line(exc, 200)}",
                          "give the model checkpoint's directory (tokenizer files included)"
                          ) from exc

    eos = tok.eos_token_id
    return _HfText(tok), len(tok), eos if isinstance(eos, int) else None


class _HfText(TextTokenizer):
    """A Hugging Face tokenizer as the client's :class:`TextTokenizer`."""

    def __init__(self, tok: Any) -> None:
        self._tok = tok

    def encode(self, text: str) -> list[int]:
        return list(self._tok(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids, skip_special_tokens=False,
                                    clean_up_tokenization_spaces=False))
