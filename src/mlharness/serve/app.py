"""The node's HTTP server: FastAPI routes on uvicorn (httptools parser, uvloop when installed).

Why this stack: the LoadGen side keeps one HTTP/1.1 keep-alive connection per engine thread and
sends small binary bodies; uvicorn with httptools answers such requests in tens of microseconds,
and the routes take the raw body (no JSON, no validation per request), so the cost per batch is
one round trip plus a memcpy. gRPC would add protobuf stubs and an HTTP/2 stack for no gain at
these message sizes, and plain ``curl`` could no longer probe a node.

Routes: ``GET /health`` (alive), ``GET /ready`` (model loaded and not draining: 200 with what
the node serves, else 503), ``POST /load`` / ``/unload`` / ``/predict`` (int64 indices, see
``wire.py``), ``GET /stats``. On SIGTERM or SIGINT the node stops being ready, answers new work
with 503, finishes the batches it holds and exits.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from mlharness.serve import wire
from mlharness.serve.node import Node


class NodeState:
    """Life cycle of a node: loading -> ready -> draining (or failed)."""

    def __init__(self, make_node: Callable[[], Node], workers: int) -> None:
        self.make_node = make_node
        self.node: Node | None = None
        self.status = "loading"
        self.failure: BaseException | None = None
        self.pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="node")
        self.in_flight = 0
        self.on_failure: Callable[[], None] = lambda: None

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


def create_app(state: NodeState) -> FastAPI:
    app = FastAPI(title="mlharness SUT node", docs_url=None, redoc_url=None, openapi_url=None)

    def refuse() -> Response | None:
        if state.status != "ready" or state.node is None:
            return Response(state.status, status_code=503, media_type="text/plain")
        return None

    async def run(fn: Callable[[list[int]], Any], request: Request) -> Any:
        node = state.node
        assert node is not None
        try:
            indices = wire.decode_indices(await request.body(), node.total)
        except wire.WireError as exc:
            return Response(str(exc), status_code=400, media_type="text/plain")
        state.in_flight += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(state.pool, fn, indices)
        except Exception as exc:  # noqa: BLE001 - the client gets the backend's error
            last = traceback.format_exception_only(type(exc), exc)[-1].strip()
            return Response(f"backend failed: {last}", status_code=500, media_type="text/plain")
        finally:
            state.in_flight -= 1

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": state.status, "in_flight": state.in_flight}

    @app.get("/ready")
    async def ready() -> Response:
        refused = refuse()
        if refused is not None:
            return refused
        assert state.node is not None
        return JSONResponse(state.node.describe())

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        return {"status": state.status, **(state.node.stats() if state.node else {})}

    @app.post("/predict")
    async def predict(request: Request) -> Response:
        refused = refuse()
        if refused is not None:
            return refused
        assert state.node is not None
        out = await run(state.node.predict, request)
        if isinstance(out, Response):
            return out
        return Response(wire.encode_responses(out), media_type=wire.CONTENT_TYPE)

    async def samples(request: Request, action: str) -> Response:
        refused = refuse()
        if refused is not None:
            return refused
        assert state.node is not None
        out = await run(getattr(state.node, action), request)
        return out if isinstance(out, Response) else Response(status_code=204)

    @app.post("/load")
    async def load(request: Request) -> Response:
        return await samples(request, "load")

    @app.post("/unload")
    async def unload(request: Request) -> Response:
        return await samples(request, "unload")

    return app


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
