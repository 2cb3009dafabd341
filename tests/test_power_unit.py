"""Power pieces without a server: the metric, finding the official client, refusals, reading
the official checker's output, the failure messages, the SNTP responder."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest

from mlharness.cli.main import main
from mlharness.errors import ConfigError, HarnessError
from mlharness.power.metric import metric_from_logs
from mlharness.power.official import ENV_VAR, find_power_dev, parse_check_output
from mlharness.power.session import ClientOutcome, PowerOptions, classify, known_failure
from power_support import POWER_DEV, SIMULATOR_CONF, need_power_dev

DETAIL = """\
:::MLLOG {{"key": "effective_scenario", "value": "{scenario}", "metadata": {{}}}}
:::MLLOG {{"key": "power_begin", "value": "11-23-2026 10:00:00.500", "metadata": {{}}}}
:::MLLOG {{"key": "power_end", "value": "11-23-2026 10:00:04.500", "metadata": {{}}}}
:::MLLOG {{"key": "result_query_count", "value": 200, "metadata": {{}}}}
:::MLLOG {{"key": "result_samples_per_second", "value": 500.0, "metadata": {{}}}}
:::MLLOG {{"key": "result_completed_samples_per_sec", "value": 50.0, "metadata": {{}}}}
"""
# samples at :00 (before the window), :01..:04 inside, :05 after; one bogus -1 reading inside
SPL = "".join(f"Time,11-23-2026 10:00:0{s}.000,Watts,{w},Volts,230.0,Amps,0.5,PF,0.9,Mark,x_testing\n"
              for s, w in [(0, 500.0), (1, 100.0), (2, 110.0), (3, -1.0), (4, 120.0), (5, 900.0)])


def _run(tmp: Path, scenario: str) -> Path:
    (tmp / "mlperf_log_detail.txt").write_text(DETAIL.format(scenario=scenario))
    (tmp / "spl.txt").write_text(SPL)
    return tmp


@pytest.mark.parametrize("scenario, metric, unit", [
    ("Offline", 110.0, "Watts"), ("Server", 110.0, "Watts"),
    # SingleStream/MultiStream: 110 W x 4 s x 1000 / 200 queries = 2200 mJ per query
    ("SingleStream", 2200.0, "millijoules"), ("MultiStream", 2200.0, "millijoules")])
def test_power_metric_per_scenario(tmp_path: Path, scenario: str, metric: float, unit: str):
    m = metric_from_logs(_run(tmp_path, scenario))
    assert (m.metric, m.unit, m.samples, m.window_s) == (pytest.approx(metric), unit, 3, 4.0)
    if scenario == "Offline":
        assert m.efficiency == pytest.approx(500.0 / 110.0)


def _spl(readings: list[str]) -> str:
    """Samples at :01, :02, … (inside the test window 00.5..04.5 for the first four)."""
    return "".join(f"Time,11-23-2026 10:00:0{i + 1}.000,Watts,{w},Volts,230.0,Amps,0.5,PF,0.9,"
                   "Mark,x_testing\n" for i, w in enumerate(readings))


@pytest.mark.parametrize("readings", [["inf"] * 4, ["nan", "-1", "0", "garbage"]],
                         ids=["all-inf", "all-garbage"])
def test_no_valid_power_sample_is_no_metric(tmp_path: Path, readings: list[str]):
    run = _run(tmp_path, "Offline")
    (run / "spl.txt").write_text(_spl(readings))
    with pytest.raises(HarnessError) as exc:
        metric_from_logs(run)
    assert "no valid power samples" in exc.value.message
    assert "4 in it, none a finite reading > 0 W" in exc.value.message


def test_a_metric_from_a_minority_of_good_samples_carries_a_warning(tmp_path: Path):
    run = _run(tmp_path, "Offline")
    (run / "spl.txt").write_text(_spl(["130.0", "inf", "garbage", "-1"]))
    m = metric_from_logs(run)
    assert (m.metric, m.samples, m.bad_samples) == (130.0, 1, 3)
    assert m.warning and "rests on 1 of the 4 analyzer samples" in m.warning
    assert m.to_dict()["warning"] == m.warning  # what run.json's power section gets
    from mlharness.cli.render import power_lines
    from mlharness.record import RunRecord
    from mlharness.spec import RunSpec

    record = RunRecord(benchmark="demo", spec=RunSpec(benchmark="demo"),
                       power={**m.to_dict(), "server": "h:1"})
    shown = "\n".join(power_lines(record))
    assert "warning:" in shown and "rests on 1 of the 4" in shown


def test_a_metric_from_a_majority_of_good_samples_has_no_warning(tmp_path: Path):
    m = metric_from_logs(_run(tmp_path, "Offline"))  # SPL: 3 good of 4 in the window
    assert (m.samples, m.bad_samples, m.warning) == (3, 1, None)


def test_the_shipped_simulator_server_conf_is_read_by_the_official_server(monkeypatch):
    """docs/power-simulator.server.conf, as docs/power.md tells to use it, through the
    official server's own reader (lib/server.py ServerConfig, which exits on an unknown or
    unparsable option)."""
    need_power_dev()
    monkeypatch.syspath_prepend(str(POWER_DEV))
    from ptd_client_server.lib.server import ServerConfig

    conf = ServerConfig(str(SIMULATOR_CONF))
    assert (conf.host, conf.port, conf.ntp_server) == ("127.0.0.1", 4950, "127.0.0.1")
    assert conf.ptd_command[0][0] == "./ptd" and conf.ptd_command[0][-2:] == ["0", "SIMULATED"]
    assert conf.ptd_port == [8888] and conf.ptd_device_type == [0]
    conf.tmp_dir.cleanup()


def test_power_dev_not_found_refuses_with_a_hint(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(ConfigError) as exc:
        find_power_dev()
    assert "mlcommons-power" in exc.value.message and "--power-dev" in exc.value.hint
    with pytest.raises(ConfigError):
        find_power_dev(tmp_path)  # not a checkout
    code = main(["run", "-b", "demo", "--power", "--power-server", "127.0.0.1",
                 "--output-dir", str(tmp_path / "runs")])
    assert code == 2 and "power-dev" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()  # refused before anything ran


def test_power_flag_combinations(tmp_path: Path, capsys):
    assert main(["run", "-b", "demo", "--power"]) == 2
    assert "--power-server" in capsys.readouterr().err
    assert main(["run", "-b", "demo", "--power-server", "h"]) == 2
    assert main(["run", "-b", "demo", "--power", "--power-server", "h:notaport"]) == 2
    assert PowerOptions("10.0.0.2").host_port() == ("10.0.0.2", 4950)
    assert PowerOptions("10.0.0.2:4951").to_dict() == {"server": "10.0.0.2:4951",
                                                       "ntp": "10.0.0.2", "settle_s": 0.0}


CHECK_OUTPUT = """\
INFO:main:[x] Check client sources checksum
ERROR:main:[ ] Check PTD commands and replies
ERROR:main:\tPTD version 'sim' is not supported. Supported versions are ['1.11.1']

WARNING:main:[x] Check time difference
WARNING:main:\tDuration of the testing mode (1.0) is lower than that of ranging mode

INFO:main:[x] Check debug is disabled on server-side
ERROR:main:
ERROR: Not all checks passed
"""


def test_power_check_output_is_read_per_check():
    r = parse_check_output(CHECK_OUTPUT)
    assert r.passed == ["Check client sources checksum", "Check time difference",
                        "Check debug is disabled on server-side"]
    assert r.failed == {"Check PTD commands and replies":
                        "PTD version 'sim' is not supported. Supported versions are ['1.11.1']"}
    assert "lower than that of ranging" in r.warnings["Check time difference"]


@pytest.mark.parametrize("text, code, words", [
    ("client [CRITICAL] Could not connect to the server 10.0.0.9:4950 [Errno 111]", 2, "unreachable"),
    ("client [CRITICAL] The server is disconnected", 3, "dropped the connection"),
    ("client [INFO] Got response: 'Error setting voltage range: [-1]'\n"
     "client [CRITICAL] Got an unexpecting response from the server", 3,
     "rejected a measurement step: Error setting voltage range"),
    ("subprocess.CalledProcessError: Command 'x' returned non-zero exit status 3.", 3, "workload"),
])
def test_power_client_failures_are_explained(text: str, code: int, words: str):
    err = classify(ClientOutcome(1, False, text), "10.0.0.9:4950", 60)
    assert err.exit_code == code and words in err.message and err.hint
    stalled = classify(ClientOutcome(None, True, ""), "h:1", 45)
    assert stalled.exit_code == 3 and "45 s" in stalled.message


def test_a_failed_clock_sync_is_explained_although_the_client_exits_0():
    """lib/client.py sync_check calls exit() (status 0) when NTP fails: the message, not the
    status, says what happened (docs/power.md: exit 2)."""
    text = ("client [ERROR] Got an exception. Could not synchronize\n"
            "ntplib.NTPException: No response received from 127.0.0.2.\n")
    err = known_failure(text, "127.0.0.1:4950")
    assert err is not None and err.exit_code == 2
    assert err.message == "clock synchronisation over NTP failed" and "--ntp" in err.hint


def test_power_ntp_responder_answers_sntp():
    from mlharness.power.ntp import NTP_DELTA, Responder

    with socket.socket() as probe:  # any free UDP port will do for the unit test
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    r = Responder("127.0.0.1", port).start()
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(5)
            request = bytearray(48)
            request[0] = 0x23  # version 4, client mode
            request[40:48] = b"ABCDEFGH"
            s.sendto(bytes(request), ("127.0.0.1", port))
            reply = s.recv(512)
        assert len(reply) == 48 and reply[0] & 0x7 == 4 and reply[1] == 1
        assert reply[24:32] == b"ABCDEFGH"  # originate = the client's transmit time
        secs = struct.unpack("!I", reply[40:44])[0] - NTP_DELTA
        assert abs(secs - time.time()) < 5
    finally:
        r.stop()
