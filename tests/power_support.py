"""Loopback power set-up for tests: an SNTP responder on 127.0.0.1:123, the official MLCommons
power server (``../shared/official/power-dev``, unchanged) configured to start the mlharness
PTDaemon simulator as its ``ptd`` binary, and helpers to read the official checkers' verdicts."""

from __future__ import annotations

import configparser
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[1]
OFFICIAL = REPO / ".." / "shared" / "official"  # the pinned referee (../shared/official/README.md)
POWER_DEV = Path(os.environ.get("MLPERF_POWER_DEV") or OFFICIAL / "power-dev").resolve()
from referee import INFERENCE, require as require_referee  # noqa: E402, F401  (re-exported: one MLPERF_INFERENCE_DIR lookup)
#: the server.conf docs/power.md ships for the simulator; every simulated server starts from it
SIMULATOR_CONF = REPO / "docs" / "power-simulator.server.conf"
HAS_POWER_DEV = (POWER_DEV / "ptd_client_server" / "lib" / "client.py").is_file()

#: compliance/check.py checks a simulator cannot pass, and why (its messages contain these)
SIMULATOR_FAILS = {
    # Identify must name a supported Yokogawa analyzer and PTDaemon 1.11.1
    "Check PTD commands and replies": "PTD version 'sim' is not supported",
    # only PTDaemon driving a Yokogawa analyzer prints "Uncertainty checking for Yokogawa… is activated"
    "Check errors and warnings from PTD logs": "Uncertainty checking for Yokogawa",
    # server.conf's deviceType 0 (PTDaemon's dummy device) is not a supported analyzer
    "Check PTD configuration": "Device number 0 is not supported",
}
CHECKS = ["Check client sources checksum", "Check server sources checksum",
          "Check PTD commands and replies", "Check UUID", "Check session name",
          "Check time difference", "Check client server messages", "Check results checksum",
          "Check errors and warnings from PTD logs", "Check PTD configuration",
          "Check debug is disabled on server-side"]


def need_power_dev() -> None:
    if not HAS_POWER_DEV:
        reason = f"the official power-dev is not at {POWER_DEV} (set MLPERF_POWER_DEV)"
        if os.environ.get("CI"):
            pytest.fail(reason + " — CI has ../shared/official beside the clone")
        pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ntp_answers(host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(1.0)
        try:
            s.sendto(b"\x23" + b"\0" * 47, (host, 123))
            return len(s.recv(512)) >= 48
        except OSError:
            return False


@contextmanager
def ntp_responder() -> Iterator[None]:
    """SNTP on 127.0.0.1:123 for the official client/server. Skips locally when port 123 cannot
    be bound (not root); in CI (CI=true, root) that is a failure, not a skip."""
    from mlharness.power.ntp import Responder

    try:
        responder = Responder("127.0.0.1", 123).start()
    except OSError as exc:
        if _ntp_answers():
            yield  # something already serves NTP on loopback (an earlier test's responder)
            return
        reason = f"cannot serve NTP on 127.0.0.1:123 ({exc}); the power client and server insist on it"
        if os.environ.get("CI"):
            pytest.fail(reason + " — CI runs as root and must be able to bind it")
        pytest.skip(reason + " — run as root")
    try:
        yield
    finally:
        responder.stop()


def write_ptd_wrapper(path: Path) -> Path:
    """An executable the server starts as ``ptd``: the simulator under this interpreter."""
    path.write_text(f"#!/bin/sh\nexec {sys.executable} -m mlharness.power.simulator \"$@\"\n")
    path.chmod(0o755)
    return path


def simulator_conf(path: Path, port: int, ptd_port: int, ptd: Path) -> Path:
    """The shipped docs/power-simulator.server.conf with this test's ports and ptd wrapper."""
    conf = configparser.ConfigParser()
    conf.optionxform = str  # keep the server's option names as written
    conf.read(SIMULATOR_CONF)
    conf["server"]["listen"] = f"127.0.0.1 {port}"
    conf["ptd"]["ptd"] = str(ptd)
    conf["analyzer1"]["networkPort"] = str(ptd_port)
    with open(path, "w") as out:
        conf.write(out)
    return path


@contextmanager
def power_server(workdir: Path, fault: str = "", fault_at: str = "Go",
                 debug: bool = False, watts: str = "") -> Iterator[str]:
    """The official power server on a free loopback port with the simulator; yields HOST:PORT.
    ``debug`` sets MLPP_DEBUG (0.5 s analyzer settle instead of 10 s; server.json then says
    debug, which compliance/check.py rejects — only for the failure tests)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port, ptd_port = free_port(), free_port()
    ptd = write_ptd_wrapper(workdir / "ptd")
    conf = simulator_conf(workdir / "server.conf", port, ptd_port, ptd)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    env.pop("MLPP_DEBUG", None)
    if debug:
        env["MLPP_DEBUG"] = "1"
    if fault:
        env.update(MLH_PTD_FAULT=fault, MLH_PTD_FAULT_AT=fault_at)
    if watts:  # bad analyzer readings: inf | one-in-3 (mlharness.power.simulator)
        env["MLH_PTD_WATTS"] = watts
    log = workdir / "server.out"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, str(POWER_DEV / "ptd_client_server" / "server.py"),
                                 "-c", str(conf)], cwd=workdir, stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while "Ready to accept connections" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("the official power server did not start:\n" + log.read_text())
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        try:  # the server and the simulator it started share the session we created
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


def power_check(session_dir: Path):
    """compliance/check.py on a session directory (power/, ranging/, run_1/)."""
    from mlharness.power.official import PowerDev, run_check

    return run_check(session_dir, PowerDev(POWER_DEV, "flag"))


def assert_simulator_verdict(report) -> None:
    """Every check passes except exactly the three a simulator cannot pass, for their reasons."""
    assert sorted(report.passed + list(report.failed)) == sorted(CHECKS), report.output
    assert set(report.failed) == set(SIMULATOR_FAILS), report.output
    for name, why in SIMULATOR_FAILS.items():
        assert why in report.failed[name], (name, report.failed[name])
