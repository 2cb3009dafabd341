"""A remote run: LoadGen's batches go to ``mlharness serve`` nodes over HTTP.

Every node holds the dataset and a backend; this side sends sample indices and gets the task's
response bytes back (``protocol/wire.py``). One keep-alive connection per engine thread and node
(the standard library's ``http.client``: nothing to install). LoadGen's sample loads go to every
node. Options (the run's ``distribution`` section): ``endpoints`` (list of URLs), ``failover``,
``request_timeout`` (a batch not answered whole in time counts as a stalled node: a deadline
for the whole answer, so a node trickling bytes is caught too), ``token_file`` (else
``$MLHARNESS_NODE_TOKEN``). Every request carries the run's id, so runs sharing a node keep
their sample loads apart.
"""

from __future__ import annotations

import heapq
import http.client
import itertools
import json
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mlharness.distributed.pool import PoolBackend, ReplicaDown, ReplicaPool
from mlharness.distribution import Distribution
from mlharness.errors import ConfigError
from mlharness.protocol import wire
from mlharness.protocol.token import TOKEN_ENV, read_token
from mlharness.spec import RunSpec

CONNECT_TIMEOUT_S = 5.0
LOAD_TIMEOUT_S = 600.0  # loading samples may read a large cache; the run's stall timeout still holds


class NodeError(RuntimeError):
    """The node answered, with an error (its backend raised, or it refused the request)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def plain(text: str, limit: int = 300) -> str:
    """A node's words as one line of printable text (no control characters), at most ``limit``."""
    text = "".join(c if c.isprintable() else " " for c in text.replace("\n", " ")).strip()
    return text[:limit]


class Deadlines:
    """One watchdog thread that shuts down a connection's socket when its request's total
    deadline passes: a socket timeout only bounds each read, so a node sending a byte every few
    seconds would otherwise hold a batch for ever."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, socket.socket]] = []
        self._live: set[int] = set()
        self._fired: set[int] = set()
        self._ids = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def start(self, sock: socket.socket, seconds: float) -> int:
        with self._cond:
            key = next(self._ids)
            heapq.heappush(self._heap, (time.monotonic() + seconds, key, sock))
            self._live.add(key)
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="node-deadlines",
                                                daemon=True)
                self._thread.start()
            if self._heap[0][1] == key:  # sooner than the one the watchdog waits for
                self._cond.notify()
            return key

    def stop(self, key: int) -> bool:
        """Forget ``key``; True if its deadline fired (the socket was shut down)."""
        with self._cond:
            self._live.discard(key)
            if key in self._fired:
                self._fired.discard(key)
                return True
            return False

    def _watch(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][1] not in self._live:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                due, key, sock = self._heap[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
                self._live.discard(key)
                self._fired.add(key)
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


DEADLINES = Deadlines()


class NodeClient:
    """One node: its URL, a connection per calling thread, and what it said at start-up."""

    def __init__(self, url: str, timeout_s: float, token: str | None = None,
                 run_id: str = "") -> None:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ConfigError(f"endpoint {url!r} is not http://HOST:PORT",
                              hint="e.g. --endpoint http://10.0.0.2:8101")
        self.name = f"http://{parts.hostname}:{parts.port}"
        self.host, self.port = parts.hostname, parts.port
        self.timeout_s = timeout_s
        self.headers = {"X-Mlharness-Run": run_id}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.info: dict[str, Any] = {}
        self.lost = False  # gone, stalled or draining: not asked anything at close
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
        """Send one request and read the whole answer within ``timeout_s`` (default the
        request timeout); ReplicaDown when the node is gone or silent, NodeError on 4xx/5xx."""
        timeout = timeout_s or self.timeout_s
        headers = {**self.headers, **({"Content-Type": wire.CONTENT_TYPE} if body else {})}
        for attempt in (1, 2):
            conn = self._connection()
            reused = conn.sock is not None
            key = None
            try:
                if conn.sock is None:
                    conn.connect()
                conn.sock.settimeout(timeout)
                key = DEADLINES.start(conn.sock, timeout)
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                status = resp.status
            except (OSError, http.client.HTTPException) as exc:
                self._drop(conn)
                fired = key is not None and DEADLINES.stop(key)
                if fired or isinstance(exc, TimeoutError):
                    self.lost = True
                    raise ReplicaDown(f"no answer to {method} {path} within {timeout:g} s "
                                      "(stalled)") from exc
                if reused and attempt == 1 and not isinstance(exc, ConnectionRefusedError):
                    continue  # the node may have closed an idle keep-alive connection: retry once
                self.lost = True
                raise ReplicaDown(plain(f"{type(exc).__name__}: {exc or 'connection lost'}")) \
                    from exc
            if DEADLINES.stop(key):  # the answer came whole just as the deadline fired
                self._drop(conn)
            if status == 503:
                self.lost = True
                why = plain(data.decode(errors="replace"), 200)
                raise ReplicaDown(f"node is not serving ({why})")
            if status >= 400:
                raise NodeError(f"node {self.name} answered {status} to {method} {path}: "
                                f"{plain(data.decode(errors='replace'))}", status)
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
        """Tell the node this run is over (it drops the samples the run still holds; a lost node
        is not waited for), then close the connections."""
        if not self.lost:
            try:
                self.request("POST", "/release", b"", CONNECT_TIMEOUT_S)
            except (ReplicaDown, NodeError):
                pass
        with self._lock:
            for conn in self._all:
                conn.close()

    def ready(self) -> dict[str, Any]:
        """The node's /ready answer (ConfigError when it cannot be reached or is not ready)."""
        try:
            self.info = json.loads(self.request("GET", "/ready", timeout_s=CONNECT_TIMEOUT_S))
        except NodeError as exc:
            if exc.status == 401:
                raise ConfigError(f"node {self.name} refused this run's token" if "Authorization"
                                  in self.headers else f"node {self.name} needs a token",
                                  hint=f"pass --token-file PATH or set ${TOKEN_ENV} to the "
                                       "node's token") from exc
            raise ConfigError(f"node {self.name} is not ready: {exc}",
                              hint="start it with `mlharness serve -b BENCH --port P` and wait "
                                   "until it prints 'ready'") from exc
        except (ReplicaDown, ValueError) as exc:
            raise ConfigError(f"node {self.name} is not ready: {exc}",
                              hint="start it with `mlharness serve -b BENCH --port P` and wait "
                                   "until it prints 'ready'") from exc
        return self.info


class RemoteBackend(PoolBackend):
    """``--endpoint URL [--endpoint URL ...] [--failover]``: the run's samples on serve nodes."""

    name = "remote"

    def __init__(self) -> None:
        super().__init__()
        self.nodes: list[NodeClient] = []
        self.section = Distribution(kind="remote", endpoints=["http://unset:1"])

    def open(self, spec: RunSpec, model: Path | None = None) -> None:
        """Connect to every node of ``spec.distribution`` and check they serve this run."""
        section = spec.distribution
        token = read_token(section.token_file)
        run_id = uuid.uuid4().hex
        self.nodes = [NodeClient(url, section.request_timeout, token, run_id)
                      for url in section.endpoints]
        if len({n.name for n in self.nodes}) != len(self.nodes):
            raise ConfigError("the same endpoint is given twice", hint="list each node once")
        for node in self.nodes:
            info = node.ready()
            if info.get("benchmark") != spec.benchmark:
                raise ConfigError(f"node {node.name} serves {info.get('benchmark')!r}, this run "
                                  f"is {spec.benchmark!r}", hint="start the node with the same -b")
        totals = {n.info.get("total") for n in self.nodes}
        if len(totals) != 1:
            sizes = sorted(map(str, totals))
            raise ConfigError(f"the nodes hold datasets of different sizes {sizes}",
                              hint="give every node the same --dataset and --max-samples")
        self._start(ReplicaPool(self.nodes, section.failover, "node"), self.nodes[0].info)
        self.section = section

    @property
    def sut_name(self) -> str:
        # the network division's checker wants "Network SUT" in the logged sut_name
        return "mlharness Network SUT: " + ", ".join(
            n.info.get("node", n.name) for n in self.nodes)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "sut_name": self.sut_name,
                "failover": self.section.failover,
                "request_timeout_s": self.nodes[0].timeout_s if self.nodes else None,
                "nodes": [{"endpoint": n.name, **n.info} for n in self.nodes]}
