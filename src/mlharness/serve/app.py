"""The node's HTTP server: uvicorn (httptools parser, uvloop when installed) with FastAPI for
the probes and a raw ASGI fast path for the work routes.

Why this stack: the LoadGen side keeps one HTTP/1.1 keep-alive connection per engine thread and
sends small binary bodies; uvicorn with httptools parses such a request in microseconds, and the
work routes read the raw body (no JSON, no per-request validation) and answer with the response
bytes, so a batch costs one round trip plus a copy. gRPC would add protobuf stubs and an HTTP/2
stack for no gain at these message sizes, and ``curl`` could no longer probe a node.

Routes: ``GET /health`` (alive), ``GET /ready`` (model loaded and not draining: 200 with what
the node serves, else 503), ``POST /load`` / ``/unload`` / ``/predict`` (int64 indices, see
``wire.py``), ``GET /stats``. On SIGTERM or SIGINT the node stops being ready, answers new work
with 503, finishes the batches it holds and exits.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from mlharness.serve import wire
from mlharness.serve.node import Node


#: batches shorter than this run on the event loop when the node has one worker
INLINE_BELOW_S = 0.005


class NodeState:
    """Life cycle of a node: loading -> ready -> draining (or failed)."""

    def __init__(self, make_node: Callable[[], Node], workers: int) -> None:
        self.make_node = make_node
        self.node: Node | None = None
        self.status = "loading"
        self.failure: BaseException | None = None
        self.pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="node")
        self.in_flight = 0
        self.workers = workers
        self.inline = workers == 0  # run batches on the event loop: no thread hop per batch
        self.batch_s = 1.0  # moving average of a batch's duration (unknown: assume long)
        self.on_failure: Callable[[], None] = lambda: None  # the model failed to load

    @property
    def short_batches(self) -> bool:
        """With one worker, batches shorter than INLINE_BELOW_S run on the event loop: the hop
        to a thread would cost more than the batch, and a probe waits at most that long."""
        return self.workers == 1 and self.batch_s < INLINE_BELOW_S

    def timed(self, seconds: float) -> None:
        self.batch_s = 0.8 * self.batch_s + 0.2 * seconds

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


async def handle(state: NodeState, action: str, body: bytes) -> tuple[int, str, bytes]:
    """One POST to /predict, /load or /unload: (status, content type, body)."""
    node = state.node
    if state.status != "ready" or node is None:
        return 503, "text/plain", state.status.encode()
    try:
        indices = wire.decode_indices(body, node.total)
    except wire.WireError as exc:
        return 400, "text/plain", str(exc).encode()
    fn = getattr(node, action)
    state.in_flight += 1
    t0 = time.perf_counter()
    try:
        if state.inline or (action == "predict" and state.short_batches):
            out = fn(indices)
        else:
            out = await asyncio.get_running_loop().run_in_executor(state.pool, fn, indices)
        if action == "predict":
            state.timed(time.perf_counter() - t0)
    except Exception as exc:  # noqa: BLE001 - the client gets the backend's error
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return 500, "text/plain", f"backend failed: {last}".encode()
    finally:
        state.in_flight -= 1
    if action == "predict":
        return 200, wire.CONTENT_TYPE, wire.encode_responses(out)
    return 204, "text/plain", b""


#: the routes that carry work; served without the framework (see FastPath)
WORK_ROUTES = {"/predict": "predict", "/load": "load", "/unload": "unload"}


class FastPath:
    """ASGI in front of FastAPI: ``POST`` to a work route is answered straight from the raw
    body (no routing, no Request object: about 0.15 ms less per batch on a loaded 2-core
    machine); everything else goes to the FastAPI app."""

    def __init__(self, state: NodeState, app: Any) -> None:
        self.state = state
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        action = WORK_ROUTES.get(scope.get("path", "")) if scope["type"] == "http" else None
        if action is None or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        status, content_type, body = await handle(self.state, action, b"".join(chunks))
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", content_type.encode()),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def create_app(state: NodeState) -> FastPath:
    app = FastAPI(title="mlharness SUT node", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": state.status, "in_flight": state.in_flight}

    @app.get("/ready")
    async def ready() -> Response:
        if state.status != "ready" or state.node is None:
            return Response(state.status, status_code=503, media_type="text/plain")
        return JSONResponse(state.node.describe())

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        return {"status": state.status, **(state.node.stats() if state.node else {})}

    for path, action in WORK_ROUTES.items():  # reached only by other methods: 405
        app.add_api_route(path, _unreachable, methods=["POST"], name=action)
    return FastPath(state, app)


async def _unreachable(request: Request) -> Response:
    return Response("handled by FastPath", status_code=500)


def serve(state: NodeState, host: str, port: int, on_listening: Callable[[], None]) -> None:
    """Run the server until SIGTERM/SIGINT (draining first) or a failed model load."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            state.drain()  # not ready, no new batches; uvicorn finishes the open requests
            super().handle_exit(sig, frame)
            if sig == signal.SIGTERM:  # a drained node exits 0 (uvicorn would re-raise SIGTERM)
                getattr(self, "_captured_signals", []).clear()

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started:
                on_listening()

    config = uvicorn.Config(create_app(state), host=host, port=port, log_level="warning",
                            access_log=False, timeout_keep_alive=600,
                            timeout_graceful_shutdown=60, lifespan="off")
    server = DrainingServer(config)

    def stop_after_failure() -> None:
        server.should_exit = True

    state.on_failure = stop_after_failure
    state.start_loading()
    server.run()
    state.pool.shutdown(wait=True)
