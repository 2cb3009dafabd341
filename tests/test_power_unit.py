"""Power pieces without a server: the metric, finding the official client, refusals, reading
the official checker's output, the failure messages, the SNTP responder."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest

from mlharness.cli.main import main
from mlharness.errors import ConfigError
from mlharness.power.metric import metric_from_logs
from mlharness.power.official import ENV_VAR, find_power_dev, parse_check_output
from mlharness.power.session import ClientOutcome, PowerOptions, classify

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
