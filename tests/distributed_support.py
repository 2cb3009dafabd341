"""Real `mlharness serve` nodes, a real local Ray head and `mlharness run` processes on loopback.

Every wait is bounded in time; every process a test starts is stopped by the test (by its own
process id or, for the Ray head, by the process group `ray start --block` leads).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from mlharness.backends.base import Backend

BIN = Path(sys.executable).parent
MLHARNESS = str(BIN / "mlharness")
HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def http(method: str, url: str, body: bytes | None = None, timeout: float = 5.0,
         headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method=method,
                                 headers={"Content-Type": "application/octet-stream",
                                          **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class NodeProcess:
    """One `mlharness serve` process; ``stop()`` drains it with SIGTERM, then kills it."""

    def __init__(self, log_dir: Path, benchmark: str, *args: str,
                 env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.log = log_dir / f"node-{self.port}.log"
        self.headers: dict[str, str] = {}
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [MLHARNESS, "serve", "-b", benchmark, "--port", str(self.port), *args],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})

    def wait_ready(self, timeout: float = 90.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"node exited ({self.proc.returncode}): {self.log.read_text()}")
            try:
                code, body = http("GET", self.url + "/ready", timeout=2, headers=self.headers)
                if code == 200:
                    return json.loads(body)
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"node {self.url} not ready after {timeout} s: {self.log.read_text()}")

    def stats(self) -> dict[str, Any]:
        return json.loads(http("GET", self.url + "/stats", timeout=2, headers=self.headers)[1])

    def rss_mb(self) -> float:
        """The node process's resident memory (MB)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a stalled (stopped) node must see SIGTERM
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def start_nodes(log_dir: Path, count: int, benchmark: str, *args: str,
                env: dict[str, str] | None = None) -> list[NodeProcess]:
    nodes = [NodeProcess(log_dir, benchmark, *args, env=env) for _ in range(count)]
    try:
        for node in nodes:
            node.wait_ready()
    except BaseException:
        for node in nodes:
            node.stop()
        raise
    return nodes


def start_run(runs_dir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`mlharness run ... --json` in its own process (so a test can hurt a node meanwhile)."""
    return subprocess.Popen([MLHARNESS, "run", "--no-progress", "--json", "--output-dir",
                             str(runs_dir), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


def wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise TimeoutError(f"{what} did not happen within {timeout} s")


def only_run_dir(runs_dir: Path, benchmark: str) -> Path:
    dirs = [p for p in (runs_dir / benchmark).iterdir() if p.is_dir() and p.name != "_tune"]
    assert len(dirs) == 1, dirs
    return dirs[0]


class RayHead:
    """`ray start --head --block` on 127.0.0.1 with a small CPU count and no dashboard; its
    services share its process group, which ``stop()`` ends."""

    def __init__(self, log_dir: Path, num_cpus: int = 2) -> None:
        self.port = free_port()
        self.address = f"{HOST}:{self.port}"
        self.log = log_dir / "ray-head.log"
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [str(BIN / "ray"), "start", "--head", "--node-ip-address", HOST,
                 "--port", str(self.port), "--num-cpus", str(num_cpus),
                 "--include-dashboard", "false", "--disable-usage-stats", "--block"],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ray head exited: {self.log.read_text()[-2000:]}")
            if "will now block" in self.log.read_text():
                return
            time.sleep(0.3)
        raise TimeoutError(f"ray head not up after {timeout} s")

    def processes(self, title: str) -> list[int]:
        """Process ids in this head's session whose command line starts with ``title``."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if os.getsid(int(entry.name)) != self.proc.pid:
                    continue
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except (OSError, ProcessLookupError):
                continue
            if cmd.startswith(title):
                found.append(int(entry.name))
        return found

    def stop(self) -> None:
        """SIGTERM to `ray start` (it stops the services it started), then SIGKILL to whatever of
        its process group is left."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.proc.poll() is None:
            self.proc.wait(10)


class SlowPerSampleBackend(Backend):
    """A node backend (``--backend distributed_support:SlowPerSampleBackend``, tests/ on
    PYTHONPATH) whose batch takes $NODE_SAMPLE_S seconds per sample (default 0.001): a large
    batch is long even after many short ones."""

    name = "slow-per-sample"

    def load(self, model: Path | None, options: Any) -> None:
        self.per_sample = float(os.environ.get("NODE_SAMPLE_S", "0.001"))

    @property
    def inputs(self) -> None:
        return None

    def predict(self, inputs: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        n = len(next(iter(inputs.values())))
        time.sleep(self.per_sample * n)
        return {"label": np.zeros((n, 1), dtype=np.int64)}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


class FakeNode:
    """A misbehaving node on 127.0.0.1 (a thread of the test): /ready answers as ``info`` says,
    /load and /unload succeed, and /predict either trickles its answer one byte every
    ``trickle_s`` seconds (``mode="trickle"``) or answers 500 with ``error`` (``mode="error"``)."""

    def __init__(self, info: dict[str, Any], mode: str, error: str = "",
                 trickle_s: float = 2.0) -> None:
        import http.server
        import threading

        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._reply(200, json.dumps(info).encode())

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path != "/predict":
                    self._reply(204, b"")
                    return
                if fake.first_predict is None:
                    fake.first_predict = time.monotonic()
                if mode == "error":
                    self._reply(500, error.encode())
                else:
                    n = len(body) // 8
                    answer = (8).to_bytes(8, "little") * n + bytes(8 * n)
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    for k in range(len(answer)):
                        if fake.closing:
                            return
                        self.wfile.write(answer[k:k + 1])
                        self.wfile.flush()
                        time.sleep(trickle_s)

        self.closing = False
        self.first_predict: float | None = None  # time.monotonic() of the first /predict
        self.server = http.server.ThreadingHTTPServer((HOST, 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{HOST}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.closing = True
        self.server.shutdown()
        self.server.server_close()
