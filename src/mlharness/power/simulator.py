"""A PTDaemon stand-in for tests and dry runs without a power analyzer.

The official power server starts PTDaemon as ``ptd -l LOGFILE -p PORT [...] DEVICE_TYPE
DEVICE_PORT`` and talks to it in text lines over TCP (``ptd_client_server/lib/server.py``):
``Hello``, ``Identify``, ``RR``, ``SR,V,…``, ``SR,A,…``, ``Go,1000,0,<mark>``, ``Stop``,
``RL,*,*`` / ``RL``, ``Uncertainty``, ``Watts``. This program accepts the same command line and
answers those commands like PTDaemon's dummy device (type 0): one sample per second with plausible
watts, volts, amps and power factor, written to the ``-l`` log with the measurement's mark and
returned by ``RL``. Its stdout carries PTDaemon-style event lines (``Go with mark '…'``,
``Completed test``), which the power server keeps as ``ptd_logs.txt``.

It says what it is: ``Identify`` answers ``mlharness-ptd-simulator,…,version=sim-…``, so the
official checker's PTDaemon version/analyzer checks fail on its logs by design.

Fault injection (environment, for tests): ``MLH_PTD_FAULT=drop|stall|error`` and
``MLH_PTD_FAULT_AT=<command prefix>`` (default ``Go``): on that command it closes the
connection, stops answering, or answers ``Error: …``. ``MLH_PTD_WATTS=inf|one-in-3`` makes the
readings bad: every sample ``inf`` W, or only every third a real reading and the others ``-1``
(what an analyzer sends when it has none).

Run: ``python -m mlharness.power.simulator -l LOG -p PORT 0 DUMMY``.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import socket
import sys
import threading
import time
from datetime import datetime, timezone

VERSION = "sim-0.1"
IDENTITY = (f"mlharness-ptd-simulator,1000,1,0,0,0,0,0,1,version={VERSION}-mlharness,"
            "OS=Linux,mode=power,0,0,1,0,0,no_cal_date,na")
GO_REPLY = "Starting untimed measurement, maximum 500000 samples at {ms}ms with 0 rampup samples"
BANNER = """\
  ****************************************************************************
            mlharness PTDaemon simulator {v} (NOT SPEC PTDaemon)
     Answers the PTDaemon commands the MLCommons power server sends, with
     simulated samples. For tests and dry runs only: no analyzer is read and
     its logs are not an MLPerf power result.
  ****************************************************************************
""".format(v=VERSION)
PIPE_BLOCK = 8192  # >= the power server's log buffer (io.DEFAULT_BUFFER_SIZE / st_blksize)
BASE_WATTS = 120.0
VOLTS = 230.0


def stamp(t: float | None = None) -> str:
    """PTDaemon's time format (UTC; the power server runs PTDaemon with TZ=UTC)."""
    dt = datetime.fromtimestamp(time.time() if t is None else t, tz=timezone.utc)
    return dt.strftime("%m-%d-%Y %H:%M:%S.") + f"{dt.microsecond // 1000:03d}"


class Meter:
    """The simulated analyzer: ranges, a sampling thread, unread samples for ``RL``."""

    def __init__(self, log_path: str | None) -> None:
        self.log = open(log_path, "a", buffering=1) if log_path else None
        self.amps_range: str = "Auto"
        self.volts_range: str = "Auto"
        self.mark: str | None = None
        self.unread: list[str] = []
        self.watts: list[float] = []
        self.lock = threading.Lock()
        self.running = threading.Event()
        self.thread: threading.Thread | None = None
        self.interval = 1.0

    def sample(self) -> tuple[float, float, float, float]:
        watts = BASE_WATTS * (1.0 + 0.01 * math.sin(time.time() / 7.0)) + random.uniform(-0.3, 0.3)
        pf = 0.93 + random.uniform(-0.005, 0.005)
        volts = VOLTS + random.uniform(-0.5, 0.5)
        amps = watts / (volts * pf)
        bad = os.environ.get("MLH_PTD_WATTS", "")
        if bad == "inf" or (bad == "one-in-3" and len(self.watts) % 3):
            watts = math.inf if bad == "inf" else -1.0
        return watts, volts, amps, pf

    def _run(self) -> None:
        next_t = time.time() + self.interval
        while self.running.is_set():
            delay = next_t - time.time()
            if delay > 0:
                time.sleep(min(delay, 0.05))
                continue
            next_t += self.interval
            w, v, a, pf = self.sample()
            line = f"Time,{stamp()},Watts,{w:.6f},Volts,{v:.6f},Amps,{a:.6f},PF,{pf:.6f}"
            with self.lock:
                if not self.running.is_set():
                    break
                self.unread.append(line)
                self.watts.append(w)
                if self.log:
                    self.log.write(f"{line},Mark,{self.mark}\n")
            # PTDaemon echoes every sample on stdout (``stamp,Watts,…,Mark,…``)
            print(f"{line[len('Time,'):]},Mark,{self.mark}", flush=True)

    def go(self, interval_ms: int, mark: str) -> str:
        if self.running.is_set():
            return "Error: measurement already running"
        self.interval = max(interval_ms, 10) / 1000.0
        self.mark = mark
        with self.lock:
            self.unread.clear()
            self.watts.clear()
        self.running.set()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        event(f"Go with mark {mark!r}")
        return GO_REPLY.format(ms=interval_ms)

    def stop(self) -> str:
        if not self.running.is_set():
            return "Error: no measurement to stop"
        self.running.clear()
        if self.thread:
            self.thread.join(timeout=2)
        event("Completed test")
        self.report()
        return "Stopping untimed measurement"

    def report(self) -> None:
        """A summary of the measurement just stopped, at least one pipe block long.

        The official server keeps PTDaemon's stdout through a buffered writer (``Tee`` in
        lib/server.py) and copies that file into ``ptd_logs.txt`` before the writer is flushed,
        so only whole 4 KB blocks reach the log. PTDaemon itself prints far more than a block per
        measurement; this summary gives the simulator the same volume, so the lines of the
        measurement (``Go with mark``, ``Completed test``) are in ``ptd_logs.txt``.
        """
        with self.lock:
            watts = list(self.watts)
        lines = [f"Measurement {self.mark!r}: {len(watts)} samples"
                 + (f", average {sum(watts) / len(watts):.6f} W, min {min(watts):.6f} W, "
                    f"max {max(watts):.6f} W" if watts else "")]
        lines += [f"  sample {i + 1}: {w:.6f} W" for i, w in enumerate(watts)]
        text = "\n".join(f"{stamp()}: {line}" for line in lines)
        filler = max(0, PIPE_BLOCK - len(text))
        print(text + ("\n" + "  " + "." * filler if filler else ""), flush=True)

    def read_all(self) -> list[str]:
        with self.lock:
            lines, self.unread = self.unread, []
        return lines

    def average(self) -> float:
        with self.lock:
            return sum(self.watts) / len(self.watts) if self.watts else -1.0


def event(message: str) -> None:
    print(f"{stamp()}: {message}", flush=True)


def handle(conn: socket.socket, meter: Meter, fault: str, fault_at: str) -> bool:
    """Serve one connection; False when the simulator should exit."""
    buf = b""
    with conn:
        while True:
            try:
                chunk = conn.recv(4096)
            except OSError:
                return True
            if not chunk:
                return True
            buf += chunk
            while b"\n" in buf:
                raw, buf = buf.split(b"\n", 1)
                cmd = raw.decode(errors="replace").strip()
                if fault and cmd.startswith(fault_at):
                    event(f"injected fault {fault!r} at {cmd!r}")
                    if fault == "drop":
                        return False
                    if fault == "stall":
                        time.sleep(3600)
                        return False
                    conn.sendall(b"Error: simulated analyzer failure\r\n")
                    continue
                lines = reply(cmd, meter)
                for line in lines:
                    conn.sendall(line.encode() + b"\r\n")
                event(f"Response to client sent: {lines[0]}")


def reply(cmd: str, meter: Meter) -> list[str]:
    parts = cmd.split(",")
    head = parts[0]
    if cmd == "Hello":
        return ["Hello, PTDaemon here!"]
    if cmd == "Identify":
        return [IDENTITY]
    if cmd == "RR":
        auto_a = "1" if meter.amps_range == "Auto" else "0"
        auto_v = "1" if meter.volts_range == "Auto" else "0"
        a = "-1.000000" if auto_a == "1" else meter.amps_range
        v = "-1.000000" if auto_v == "1" else meter.volts_range
        return [f"Ranges,{auto_a},{a},{auto_v},{v}"]
    if head == "SR" and len(parts) == 3 and parts[1] in ("A", "V"):
        value = parts[2]
        if value != "Auto":
            try:
                if float(value) <= 0:
                    raise ValueError
            except ValueError:
                return [f"Error: invalid range {value!r}"]
        if parts[1] == "A":
            meter.amps_range = value
        else:
            meter.volts_range = value
        event(f"Range {parts[1]} set to {value}")
        return [f"Range {parts[1]} changed"]
    if head == "Go" and len(parts) >= 4:
        return [meter.go(int(parts[1]), parts[3])]
    if cmd == "Stop":
        return [meter.stop()]
    if cmd == "RL,*,*":
        return ["Invalid number of parameters"]
    if cmd == "RL":
        lines = meter.read_all()
        return [f"Last {len(lines)} samples", *lines]
    if cmd == "Watts":
        return [f"Watts,{meter.average():.6f}"]
    if cmd == "Uncertainty":
        return ["Uncertainty,-1.000000"]
    return [f"Unknown command {cmd!r}"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ptd-simulator", description=__doc__.splitlines()[0])
    p.add_argument("-l", dest="log", help="sample log file (PTDaemon's -l)")
    p.add_argument("-p", dest="port", type=int, default=8888, help="TCP port (default 8888)")
    p.add_argument("-c", dest="channel", help="ignored (multichannel analyzers)")
    p.add_argument("-b", dest="board", help="ignored (GPIB board)")
    p.add_argument("device", nargs="*", help="[interface flag] DEVICE_TYPE DEVICE_PORT")
    args, _unknown = p.parse_known_args(argv)
    fault = os.environ.get("MLH_PTD_FAULT", "")
    fault_at = os.environ.get("MLH_PTD_FAULT_AT", "Go")
    meter = Meter(args.log)
    print(BANNER, flush=True)
    event(f"Attempting to connect to measurement device type {' '.join(args.device) or '0'}...")
    event(f"Simulator identifies: {IDENTITY.split(',')[0]} (not a power analyzer)")
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", args.port))
    srv.listen(4)
    event(f"Establishing the listener on port {args.port}...")
    try:
        while True:
            conn, addr = srv.accept()
            event(f"Accepted connection from {addr[0]}:{addr[1]}")
            if not handle(conn, meter, fault, fault_at):
                return 1
    except KeyboardInterrupt:
        return 0
    finally:
        srv.close()


if __name__ == "__main__":
    sys.exit(main())
