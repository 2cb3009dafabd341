"""The PTDaemon simulator speaks the commands the official power server sends
(ptd_client_server/lib/server.py), with plausible samples, and fails on request."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from power_support import REPO, free_port


class Ptd:
    def __init__(self, tmp: Path, **env: str) -> None:
        self.port = free_port()
        self.log = tmp / "ptd.log"
        self.out = open(tmp / "ptd.out", "w")
        e = {**os.environ, **env,
             "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen([sys.executable, "-m", "mlharness.power.simulator", "-l",
                                      str(self.log), "-p", str(self.port), "0", "DUMMY"],
                                     stdout=self.out, stderr=subprocess.STDOUT, env=e)
        deadline = time.monotonic() + 20
        while True:
            try:
                self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline and self.proc.poll() is None
                time.sleep(0.05)
        self.buf = b""

    def line(self) -> str:
        while b"\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        raw, self.buf = self.buf.split(b"\n", 1)
        return raw.decode().rstrip("\r")

    def cmd(self, text: str) -> str:
        self.sock.sendall(text.encode() + b"\r\n")
        return self.line()

    def close(self) -> None:
        self.sock.close()
        self.proc.kill()
        self.proc.wait()
        self.out.close()


def test_ptd_simulator_protocol_and_samples(tmp_path: Path):
    ptd = Ptd(tmp_path)
    try:
        assert ptd.cmd("Hello") == "Hello, PTDaemon here!"
        ident = ptd.cmd("Identify")
        assert ident.startswith("mlharness-ptd-simulator,") and "version=sim-" in ident
        assert ptd.cmd("RR") == "Ranges,1,-1.000000,1,-1.000000"  # both autoranging
        assert ptd.cmd("SR,V,Auto") == "Range V changed"
        assert ptd.cmd("SR,A,2.5") == "Range A changed"
        assert ptd.cmd("RR") == "Ranges,0,2.5,1,-1.000000"
        assert ptd.cmd("SR,V,-1") .startswith("Error")  # a ranging run without samples
        assert ptd.cmd("Go,1000,0,sess_ranging") == (
            "Starting untimed measurement, maximum 500000 samples at 1000ms with 0 rampup samples")
        time.sleep(2.3)
        assert ptd.cmd("Stop") == "Stopping untimed measurement"
        assert ptd.cmd("Stop") == "Error: no measurement to stop"
        assert ptd.cmd("RL,*,*") == "Invalid number of parameters"  # single-channel AC meter
        head = ptd.cmd("RL")
        n = int(head.split(" ")[1])
        assert head == f"Last {n} samples" and n >= 2
        for _ in range(n):
            f = ptd.line().split(",")
            assert f[0] == "Time" and f[2::2] == ["Watts", "Volts", "Amps", "PF"]
            watts, volts, amps, pf = map(float, f[3::2])
            assert 100 < watts < 140 and 225 < volts < 235 and 0.9 < pf <= 1
            assert amps == pytest.approx(watts / (volts * pf), rel=1e-3)
        assert ptd.cmd("RL") == "Last 0 samples"
        assert float(ptd.cmd("Watts").split(",")[1]) > 100
        assert ptd.cmd("Uncertainty").startswith("Uncertainty,")
        assert ptd.cmd("Bogus").startswith("Unknown command")
    finally:
        ptd.close()
    logged = [ln for ln in ptd.log.read_text().splitlines() if ln.endswith(",Mark,sess_ranging")]
    assert len(logged) == n
    events = (tmp_path / "ptd.out").read_text()
    assert ": Go with mark 'sess_ranging'" in events and ": Completed test" in events


@pytest.mark.parametrize("fault", ["drop", "error"])
def test_ptd_simulator_fault_injection(tmp_path: Path, fault: str):
    ptd = Ptd(tmp_path, MLH_PTD_FAULT=fault, MLH_PTD_FAULT_AT="Go")
    try:
        assert ptd.cmd("Hello") == "Hello, PTDaemon here!"
        if fault == "drop":
            with pytest.raises((ConnectionError, OSError)):
                ptd.cmd("Go,1000,0,x_ranging")
            assert ptd.proc.wait(timeout=10) == 1
        else:
            assert ptd.cmd("Go,1000,0,x_ranging") == "Error: simulated analyzer failure"
    finally:
        ptd.close()
