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

BIN = Path(sys.executable).parent
MLHARNESS = str(BIN / "mlharness")
HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def http(method: str, url: str, body: bytes | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method=method,
                                 headers={"Content-Type": "application/octet-stream"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class NodeProcess:
    """One `mlharness serve` process; ``stop()`` drains it with SIGTERM, then kills it."""

    def __init__(self, log_dir: Path, benchmark: str, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.log = log_dir / f"node-{self.port}.log"
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [MLHARNESS, "serve", "-b", benchmark, "--port", str(self.port), *args],
                stdout=out, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 90.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"node exited ({self.proc.returncode}): {self.log.read_text()}")
            try:
                code, body = http("GET", self.url + "/ready", timeout=2)
                if code == 200:
                    return json.loads(body)
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"node {self.url} not ready after {timeout} s: {self.log.read_text()}")

    def stats(self) -> dict[str, Any]:
        return json.loads(http("GET", self.url + "/stats", timeout=2)[1])

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


def start_nodes(log_dir: Path, count: int, benchmark: str, *args: str) -> list[NodeProcess]:
    nodes = [NodeProcess(log_dir, benchmark, *args) for _ in range(count)]
    try:
        for node in nodes:
            node.wait_ready()
    except BaseException:
        for node in nodes:
            node.stop()
        raise
    return nodes


def start_run(runs_dir: Path, *args: str) -> subprocess.Popen:
    """`mlharness run ... --json` in its own process (so a test can hurt a node meanwhile)."""
    return subprocess.Popen([MLHARNESS, "run", "--no-progress", "--json", "--output-dir",
                             str(runs_dir), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


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
