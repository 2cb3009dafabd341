"""The ``remote`` backend: LoadGen's batches go to ``mlharness serve`` nodes over HTTP.

Every node holds the dataset and a backend; this side sends sample indices and gets the task's
response bytes back (``serve/wire.py``). One keep-alive connection per engine thread and node
(the standard library's ``http.client``: nothing to install). LoadGen's sample loads go to every
node. Options (:class:`RemoteOptions`): ``endpoints`` (list of URLs), ``failover`` (bool),
``request_timeout_s`` (a batch not answered in time counts as a stalled node).
"""

from __future__ import annotations

import http.client
import json
import threading
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import BeforeValidator

from mlharness.backends.base import BackendOptions
from mlharness.backends.pool import PoolBackend, PoolOptions, ReplicaDown, ReplicaPool
from mlharness.errors import ConfigError
from mlharness.options import parse_options
from mlharness.serve import wire

CONNECT_TIMEOUT_S = 5.0
LOAD_TIMEOUT_S = 600.0  # loading samples may read a large cache; the run's stall timeout still holds


class NodeError(RuntimeError):
    """The node answered, with an error (its backend raised, or it refused the request)."""


class NodeClient:
    """One node: its URL, a connection per calling thread, and what it said at start-up."""

    def __init__(self, url: str, timeout_s: float) -> None:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ConfigError(f"endpoint {url!r} is not http://HOST:PORT",
                              hint="e.g. --endpoint http://10.0.0.2:8101")
        self.name = f"http://{parts.hostname}:{parts.port}"
        self.host, self.port = parts.hostname, parts.port
        self.timeout_s = timeout_s
        self.info: dict[str, Any] = {}
        self._local = threading.local()
        self._all: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=CONNECT_TIMEOUT_S)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def request(self, method: str, path: str, body: bytes | None = None,
                timeout_s: float | None = None) -> bytes:
        """Send one request; ReplicaDown when the node is gone or silent, NodeError on 4xx/5xx."""
        timeout = timeout_s or self.timeout_s
        for attempt in (1, 2):
            conn = self._connection()
            reused = conn.sock is not None
            try:
                if conn.sock is None:
                    conn.connect()
                conn.sock.settimeout(timeout)
                conn.request(method, path, body=body,
                             headers={"Content-Type": wire.CONTENT_TYPE} if body else {})
                resp = conn.getresponse()
                data = resp.read()
                status = resp.status
            except TimeoutError as exc:
                self._drop(conn)
                raise ReplicaDown(f"no answer to {method} {path} within {timeout:g} s "
                                  "(stalled)") from exc
            except (OSError, http.client.HTTPException) as exc:
                self._drop(conn)
                if reused and attempt == 1 and not isinstance(exc, ConnectionRefusedError):
                    continue  # the node may have closed an idle keep-alive connection: retry once
                raise ReplicaDown(f"{type(exc).__name__}: {exc or 'connection lost'}") from exc
            if status == 503:
                raise ReplicaDown(f"node is not serving ({data.decode(errors='replace')[:200]})")
            if status >= 400:
                raise NodeError(f"node {self.name} answered {status} to {method} {path}: "
                                f"{data.decode(errors='replace')[:300]}")
            return data
        raise AssertionError("unreachable")

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        self._local.conn = None

    # ---- the Replica protocol ----------------------------------------------------------------
    def run(self, indices: list[int]) -> list[bytes]:
        body = self.request("POST", "/predict", wire.encode_indices(indices))
        try:
            return wire.decode_responses(body, len(indices))
        except wire.WireError as exc:
            raise NodeError(f"node {self.name}: {exc}") from exc

    def load(self, indices: list[int]) -> None:
        self.request("POST", "/load", wire.encode_indices(indices), LOAD_TIMEOUT_S)

    def unload(self, indices: list[int]) -> None:
        self.request("POST", "/unload", wire.encode_indices(indices), LOAD_TIMEOUT_S)

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()

    def ready(self) -> dict[str, Any]:
        """The node's /ready answer (ConfigError when it cannot be reached or is not ready)."""
        try:
            self.info = json.loads(self.request("GET", "/ready", timeout_s=CONNECT_TIMEOUT_S))
        except (ReplicaDown, NodeError, ValueError) as exc:
            raise ConfigError(f"node {self.name} is not ready: {exc}",
                              hint="start it with `mlharness serve -b BENCH --port P` and wait "
                                   "until it prints 'ready'") from exc
        return self.info


def _url_list(value: Any) -> Any:
    return [e for e in value.split(",") if e] if isinstance(value, str) else value


class RemoteOptions(PoolOptions):
    """``--backend-option`` keys of the remote backend (``--endpoint`` gives ``endpoints``)."""

    endpoints: Annotated[list[str], BeforeValidator(_url_list)] = []  # a list, or "URL,URL"


class RemoteBackend(PoolBackend):
    """``--backend remote --endpoint URL [--endpoint URL ...] [--failover]``."""

    name = "remote"
    options_model = RemoteOptions

    def __init__(self) -> None:
        super().__init__()
        self.nodes: list[NodeClient] = []
        self.options = BackendOptions()

    def load(self, model: Path | None, options: BackendOptions) -> None:
        opts = parse_options(RemoteOptions, options.extra, "remote backend option",
                             "--backend-option")
        if not opts.endpoints:
            raise ConfigError("--backend remote needs at least one --endpoint",
                              hint="start nodes with `mlharness serve`, then pass "
                                   "--endpoint http://HOST:PORT for each")
        self.nodes = [NodeClient(url, opts.request_timeout_s) for url in opts.endpoints]
        if len({n.name for n in self.nodes}) != len(self.nodes):
            raise ConfigError("the same endpoint is given twice", hint="list each node once")
        benchmark = (options.run_spec or {}).get("benchmark")
        for node in self.nodes:
            info = node.ready()
            if benchmark and info.get("benchmark") != benchmark:
                raise ConfigError(f"node {node.name} serves {info.get('benchmark')!r}, this run "
                                  f"is {benchmark!r}", hint="start the node with the same -b")
        totals = {n.info.get("total") for n in self.nodes}
        if len(totals) != 1:
            raise ConfigError(f"the nodes hold datasets of different sizes {sorted(totals)}",
                              hint="give every node the same --dataset and --max-samples")
        self._start(ReplicaPool(self.nodes, opts.failover, "node"), self.nodes[0].info)
        self.options = options

    @property
    def sut_name(self) -> str:
        # the network division's checker wants "Network SUT" in the logged sut_name
        return "mlharness Network SUT: " + ", ".join(
            n.info.get("node", n.name) for n in self.nodes)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "sut_name": self.sut_name,
                "failover": bool(self.options.extra.get("failover")),
                "request_timeout_s": self.nodes[0].timeout_s if self.nodes else None,
                "nodes": [{"endpoint": n.name, **n.info} for n in self.nodes]}
