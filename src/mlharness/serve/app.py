"""The node's HTTP server: uvicorn (httptools parser, uvloop when installed) with FastAPI for
the probes and a raw ASGI fast path for the work routes.

Why this stack: the LoadGen side keeps one HTTP/1.1 keep-alive connection per engine thread and
sends small binary bodies; uvicorn with httptools parses such a request in microseconds, and the
work routes read the raw body (no JSON, no per-request validation) and answer with the response
bytes, so a batch costs one round trip plus a copy. gRPC would add protobuf stubs and an HTTP/2
stack for no gain at these message sizes, and ``curl`` could no longer probe a node.

Routes: ``GET /health`` (alive), ``GET /ready`` (model loaded and not draining: 200 with what
the node serves, else 503), ``POST /load`` / ``/unload`` / ``/predict`` (int64 indices, see
``wire.py``), ``POST /release`` (empty body: drop what the run still holds), ``GET /stats``.
With a token every route but ``/health`` needs
``Authorization: Bearer TOKEN``. Work runs on worker threads (only batches predicted to take
under :data:`INLINE_BELOW_S` run on the event loop), so the probes answer while a batch runs.
On SIGTERM or SIGINT the node stops being ready, answers new work with 503, finishes the batches
it holds and exits.
"""

from __future__ import annotations

import asyncio
import hmac
import signal
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from mlharness.protocol import wire
from mlharness.serve import DEFAULT_MAX_BATCH
from mlharness.serve.connections import (DEFAULT_HEADER_TIMEOUT_S, default_max_connections,
                                         limited_protocol)
from mlharness.serve.node import Node

#: a batch predicted to take less than this runs on the event loop (the hop to a thread would
#: cost more than the batch; a probe waits at most about this long)
INLINE_BELOW_S = 0.005
#: a body over the limit is read (and dropped) up to this size before the 413, so the client
#: reads the answer; beyond it the connection is closed
DRAIN_BYTES = 64 * 1024 * 1024
#: the request header carrying the run's id (``distributed/remote.py`` sends one per run)
RUN_HEADER = b"x-mlharness-run"
#: what ``/ready`` shows a caller without the node's token
PUBLIC_KEYS = ("node", "benchmark", "total", "performance_count", "inputs")


class NodeState:
    """Life cycle of a node: loading -> ready -> draining (or failed), and its limits."""

    def __init__(self, make_node: Callable[[], Node], workers: int = 1,
                 token: str | None = None, max_batch: int = DEFAULT_MAX_BATCH) -> None:
        self.make_node = make_node
        self.node: Node | None = None
        self.status = "loading"
        self.failure: BaseException | None = None
        self.pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="node")
        self.in_flight = 0
        self.workers = max(1, workers)
        self.token = token
        self.max_batch = max_batch
        self.sample_s = 1.0  # moving average of a sample's share of a batch (unknown: long)
        self.on_failure: Callable[[], None] = lambda: None  # the model failed to load

    def inline(self, n: int) -> bool:
        """Run a batch of ``n`` on the event loop: one worker, and predicted under
        INLINE_BELOW_S from the batches seen so far."""
        return self.workers == 1 and n * self.sample_s < INLINE_BELOW_S

    def timed(self, seconds: float, n: int) -> None:
        self.sample_s = 0.8 * self.sample_s + 0.2 * seconds / max(1, n)

    def authorized(self, headers: list[tuple[bytes, bytes]]) -> bool:
        """Whether the request carries this node's token (False when the node has none)."""
        if not self.token:
            return False
        given = dict(headers).get(b"authorization", b"")
        return hmac.compare_digest(given, b"Bearer " + self.token.encode())

    def body_limit(self, action: str) -> int:
        """Largest body (bytes) a work route takes: a batch of --max-batch indices, or a load
        of every sample once."""
        total = self.node.total if self.node else 0
        count = self.max_batch if action == "predict" else max(total, self.max_batch)
        return count * wire.INDEX_BYTES

    def start_loading(self) -> None:
        def load() -> None:
            try:
                node = self.make_node()
                node.prepare()
                self.node = node
                if self.status == "loading":
                    self.status = "ready"
            except BaseException as exc:  # noqa: BLE001 - reported by the CLI after shutdown
                self.failure = exc
                self.status = "failed"
                self.on_failure()

        threading.Thread(target=load, name="node-load", daemon=True).start()

    def drain(self) -> None:
        if self.status in ("loading", "ready"):
            self.status = "draining"


async def handle(state: NodeState, action: str, body: bytes, run: str) -> tuple[int, str, bytes]:
    """One POST to a work route (``WORK_ROUTES``) from run ``run``: (status, content type,
    body)."""
    node = state.node
    if state.status != "ready" or node is None:
        return 503, "text/plain", state.status.encode()
    if action == "release":  # the run is over: drop what it still holds
        await asyncio.get_running_loop().run_in_executor(state.pool, node.release, run)
        return 204, "text/plain", b""
    try:
        indices = wire.decode_indices(body, node.total)
    except wire.WireError as exc:
        return 400, "text/plain", str(exc).encode()
    fn = getattr(node, action)
    n = len(indices)
    state.in_flight += 1
    t0 = time.perf_counter()
    try:
        if action == "predict" and state.inline(n):
            out = fn(indices, run)
        else:
            out = await asyncio.get_running_loop().run_in_executor(state.pool, fn, indices, run)
        if action == "predict":
            state.timed(time.perf_counter() - t0, n)
    except Exception as exc:  # noqa: BLE001 - the client gets the backend's error
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return 500, "text/plain", f"backend failed: {last}".encode()
    finally:
        state.in_flight -= 1
    if action == "predict":
        return 200, wire.CONTENT_TYPE, wire.encode_responses(out)
    return 204, "text/plain", b""


#: the routes that carry work; served without the framework (see FastPath)
WORK_ROUTES = {"/predict": "predict", "/load": "load", "/unload": "unload",
               "/release": "release"}


async def _answer(send: Callable, status: int, body: bytes,
                  content_type: str = "text/plain") -> None:
    headers = [(b"content-type", content_type.encode()),
               (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class FastPath:
    """ASGI in front of FastAPI: checks the token, and answers ``POST`` to a work route
    straight from the raw body (no routing, no Request object: about 0.15 ms less per batch on a
    loaded 2-core machine); everything else goes to the FastAPI app."""

    def __init__(self, state: NodeState, app: Any) -> None:
        self.state = state
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if self.state.token and path != "/health" and not self.state.authorized(scope["headers"]):
            await _answer(send, 401, b"this node needs its token: set MLHARNESS_NODE_TOKEN "
                                     b"(or --token-file) on the run to the node's token")
            return
        action = WORK_ROUTES.get(path)
        if action is None or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        body = await self._body(scope, receive, send, action)
        if body is None:
            return
        run = dict(scope["headers"]).get(RUN_HEADER, b"").decode(errors="replace")[:100]
        status, content_type, answer = await handle(self.state, action, body, run)
        await _answer(send, status, answer, content_type)

    async def _body(self, scope: dict, receive: Callable, send: Callable,
                    action: str) -> bytes | None:
        """The request body, or None after a 413 (a body over the limit is read and dropped, up
        to :data:`DRAIN_BYTES`, so the client gets the answer, not a reset connection)."""
        limit = self.state.body_limit(action)
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        size = int(declared) if declared.isdigit() else 0
        chunks: list[bytes] = []
        read, more = 0, True
        while more and read <= DRAIN_BYTES:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            read += len(chunk)
            more = bool(message.get("more_body"))
            size = max(size, read)
            if size <= limit:
                chunks.append(chunk)
            else:
                chunks.clear()  # over the limit: dropped as it comes
        if size > limit:
            what = f"a batch of {size // wire.INDEX_BYTES} samples" if action == "predict" \
                else f"{size // wire.INDEX_BYTES} sample indices"
            await _answer(send, 413, f"{what} is over this node's limit of "
                                     f"{limit // wire.INDEX_BYTES} (mlharness serve --max-batch "
                                     f"{self.state.max_batch})".encode())
            return None
        return b"".join(chunks)


def create_app(state: NodeState) -> FastPath:
    app = FastAPI(title="mlharness SUT node", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": state.status, "in_flight": state.in_flight}

    @app.get("/ready")
    async def ready(request: Request) -> Response:
        if state.status != "ready" or state.node is None:
            return Response(state.status, status_code=503, media_type="text/plain")
        info = state.node.describe()
        if not state.authorized(request.scope["headers"]):  # no paths, pids or host names
            info = {k: info[k] for k in PUBLIC_KEYS if k in info}
        return JSONResponse(info)

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        return {"status": state.status, **(state.node.stats() if state.node else {})}

    for path, action in WORK_ROUTES.items():  # reached only by other methods: 405
        app.add_api_route(path, _unreachable, methods=["POST"], name=action)
    return FastPath(state, app)


async def _unreachable(request: Request) -> Response:
    return Response("handled by FastPath", status_code=500)


def serve(state: NodeState, sock: Any, on_listening: Callable[[], None],
          max_connections: int | None = None,
          header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S) -> None:
    """Serve on the bound socket ``sock`` until SIGTERM/SIGINT (draining first, then returning
    normally) or a failed model load; at most ``max_connections`` connections (default:
    ``serve.connections.default_max_connections``), each closed when a request's head takes
    longer than ``header_timeout_s``."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            state.drain()  # not ready, no new batches; uvicorn finishes the open requests
            super().handle_exit(sig, frame)
            if sig in (signal.SIGTERM, signal.SIGINT):
                # a drained node exits 0 (uvicorn would re-raise the signal at the end)
                getattr(self, "_captured_signals", []).clear()

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started:
                on_listening()

    protocol = limited_protocol(max_connections or default_max_connections(), header_timeout_s)
    config = uvicorn.Config(create_app(state), log_level="warning", access_log=False,
                            timeout_keep_alive=600, timeout_graceful_shutdown=60,
                            lifespan="off", http=protocol)
    server = DrainingServer(config)

    def stop_after_failure() -> None:
        server.should_exit = True

    state.on_failure = stop_after_failure
    state.start_loading()
    server.run(sockets=[sock])
    state.pool.shutdown(wait=True)
