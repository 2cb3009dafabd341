"""``mlharness run --power`` when the power side fails: unreachable server (exit 2), PTDaemon
dropping the connection, stalling, or rejecting the testing range (exit 3) — each a one-line
error with a hint, run.json saying why, and the logs kept. The official server runs with
MLPP_DEBUG (0.5 s analyzer settle instead of 10 s) to keep these short."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from catalogue_support import alive, cli_subprocess
from mlharness.cli.main import main
from power_support import POWER_DEV, free_port, need_power_dev, ntp_responder, power_server

pytestmark = pytest.mark.slow


def _run(server: str, out: Path, *extra: str) -> int:
    return main(["run", "-b", "demo", "-s", "SingleStream", "--power", "--power-server", server,
                 "--ntp", "127.0.0.1", "--power-dev", str(POWER_DEV), "--output-dir", str(out),
                 "--no-progress", *extra])


def _record(out: Path) -> tuple[Path, dict]:
    run_dir = next((out / "demo").glob("SingleStream-power-*"))
    return run_dir, json.loads((run_dir / "run.json").read_text())


@pytest.fixture(scope="module")
def ntp():
    need_power_dev()
    with ntp_responder():
        yield


def test_power_server_unreachable(ntp, tmp_path: Path, capsys):
    code = _run(f"127.0.0.1:{free_port()}", tmp_path / "runs")
    err = capsys.readouterr().err
    assert code == 2 and "is unreachable" in err and "power_server -c" in err
    run_dir, data = _record(tmp_path / "runs")
    assert data["status"] == "error" and "unreachable" in data["error"]["message"]
    assert "Could not connect to the server" in (run_dir / "power_client.txt").read_text()


@pytest.mark.parametrize("fault, at, words, status", [
    # PTDaemon exits when measuring starts: the server dies, the client loses it
    ("drop", "Go", "dropped the connection", "failed"),
    # the testing voltage range (SR,V,<max volts of the ranging run>) is refused
    ("error", "SR,V,2", "rejected a measurement step", "failed"),
])
def test_power_server_failures(ntp, tmp_path: Path, capsys, fault: str, at: str, words: str,
                               status: str):
    with power_server(tmp_path / "director", fault=fault, fault_at=at, debug=True) as srv:
        code = _run(srv, tmp_path / "runs")
    err = capsys.readouterr().err
    assert code == 3 and words in err and "logs kept in" in err, err
    run_dir, data = _record(tmp_path / "runs")
    assert data["status"] == status and words in data["error"]["message"]
    assert (run_dir / "power_client.txt").stat().st_size > 0


def test_ntp_unreachable_is_exit_2_with_the_reason(ntp, tmp_path: Path, capsys):
    """The official client exits 0 after a failed clock sync (lib/client.py sync_check): still
    exit 2, the documented message, the record saying why, the client's log kept."""
    with power_server(tmp_path / "director", debug=True) as srv:
        code = main(["run", "-b", "demo", "-s", "SingleStream", "--power", "--power-server", srv,
                     "--ntp", "127.0.0.2", "--power-dev", str(POWER_DEV), "--output-dir",
                     str(tmp_path / "runs"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "clock synchronisation over NTP failed" in err and "--ntp" in err, err
    run_dir, data = _record(tmp_path / "runs")
    assert data["status"] == "error" and "NTP" in data["error"]["message"]
    assert "Could not synchronize" in (run_dir / "power_client.txt").read_text()


def test_a_power_run_without_a_valid_sample_fails_with_the_reason(ntp, tmp_path: Path, capsys):
    """Every reading inf W: no metric, so the power run fails (exit 3), with its logs."""
    with power_server(tmp_path / "director", debug=True, watts="inf") as srv:
        code = _run(srv, tmp_path / "runs")
    err = capsys.readouterr().err
    assert code == 3 and "no power metric: no valid power samples" in err, err
    run_dir, data = _record(tmp_path / "runs")
    assert data["status"] == "failed" and "no valid power samples" in data["error"]["message"]
    assert data["power"]["metric"] is None and "none a finite reading" in data["power"]["error"]
    assert (run_dir / "run_1" / "spl.txt").is_file() and (run_dir / "mlperf_log_detail.txt").is_file()


def test_a_metric_from_a_minority_of_good_samples_is_a_warning(ntp, tmp_path: Path, capsys):
    """Only every third reading real, the others -1 W: the metric stands on those (as the
    official checker's would), with a warning in run.json and on the screen."""
    with power_server(tmp_path / "director", debug=True, watts="one-in-3") as srv:
        code = _run(srv, tmp_path / "runs", "--min-duration", "6000")
    out = capsys.readouterr()
    run_dir, data = _record(tmp_path / "runs")
    assert code in (0, 1), out.err
    power = data["power"]
    assert power["metric"] and 1 <= power["samples"] <= power["bad_samples"], power
    assert "analyzer samples in the measured window" in power["warning"]
    assert "warning:" in out.out and "analyzer samples" in out.out


def test_power_server_stall(ntp, tmp_path: Path, capsys):
    with power_server(tmp_path / "director", fault="stall", fault_at="Go", debug=True) as srv:
        code = _run(srv, tmp_path / "runs", "--stall-timeout", "2")
    err = capsys.readouterr().err
    assert code == 3 and "stalled" in err, err
    _, data = _record(tmp_path / "runs")
    assert data["status"] == "failed" and "no progress from the power client" in data["error"]["message"]


def _processes_naming(text: str) -> list[int]:
    """Live processes whose command line mentions ``text`` (the power client, its workload)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmdline and alive(int(entry.name)):
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_a_power_run_ends_the_client_and_records_it(ntp, tmp_path: Path, sig):
    """The record says "interrupted" (never "running") and the official client, which would
    go on talking to the power server, ends with the run."""
    with power_server(tmp_path / "director", debug=True) as srv:
        proc = cli_subprocess(["run", "-b", "demo", "-s", "SingleStream", "--power",
                               "--power-server", srv, "--ntp", "127.0.0.1", "--power-dev",
                               POWER_DEV, "--output-dir", tmp_path / "runs", "--no-progress",
                               "--min-duration", "60000"], cwd=tmp_path)
        deadline = time.monotonic() + 120
        log = None
        while time.monotonic() < deadline and proc.poll() is None:  # until the client talks
            logs = list((tmp_path / "runs").glob("demo/SingleStream-power-*/power_client.txt"))
            if logs and logs[0].stat().st_size > 0 and _processes_naming(str(logs[0].parent)):
                log = logs[0]
                break
            time.sleep(0.5)
        assert log is not None and proc.poll() is None, proc.communicate()
        run_dir = log.parent
        assert _processes_naming(str(run_dir)), "the official client is running"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err
    data = json.loads((run_dir / "run.json").read_text())
    assert data["status"] == "interrupted", data.get("error")
    for _ in range(20):  # its session is ended with SIGTERM, then SIGKILL
        if not _processes_naming(str(run_dir)):
            break
        time.sleep(0.5)
    assert not _processes_naming(str(run_dir)), "the official client outlived the run"
