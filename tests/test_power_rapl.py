"""``--energy rapl`` on a fake powercap tree (this machine may have no RAPL): zones, wrap-around,
the window from the LoadGen log, the CLI, and a clean refusal where there is no RAPL."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from mlharness.cli.main import main
from mlharness.errors import ConfigError
from mlharness.power.energy import ENV_ROOT, NOTE, EnergyMeter, rapl_zones

PACKAGE_W, DRAM_W, PSYS_W = 40.0, 5.0, 60.0
MAX_UJ = 50_000_000  # small range: the counter wraps every 1.25 s at 40 W


def _zone(path: Path, name: str) -> Path:
    path.mkdir(parents=True)
    (path / "name").write_text(name + "\n")
    (path / "max_energy_range_uj").write_text(f"{MAX_UJ}\n")
    (path / "energy_uj").write_text("0\n")
    return path


class FakeRapl:
    """intel-rapl:0 (package-0 with a dram sub-zone) and intel-rapl:1 (psys), counting up at
    fixed watts in a thread, wrapping at max_energy_range_uj like the hardware."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files = {_zone(root / "intel-rapl:0", "package-0") / "energy_uj": PACKAGE_W,
                      _zone(root / "intel-rapl:0" / "intel-rapl:0:0", "dram") / "energy_uj": DRAM_W,
                      _zone(root / "intel-rapl:1", "psys") / "energy_uj": PSYS_W}
        self.t0 = time.time()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.02):
            dt = time.time() - self.t0
            for f, watts in self.files.items():  # atomically, as sysfs reads are
                tmp = f.with_suffix(".tmp")
                tmp.write_text(f"{int(watts * dt * 1e6) % MAX_UJ}\n")
                os.replace(tmp, f)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def test_power_rapl_zones_and_wraparound(tmp_path: Path):
    fake = FakeRapl(tmp_path / "powercap")
    try:
        zones = rapl_zones(fake.root)
        assert [(z.name, z.counted) for z in zones] == [
            ("package-0", True), ("package-0/dram", False), ("psys", False)]
        meter = EnergyMeter(zones)
        meter.start()
        time.sleep(3.0)  # the package counter wraps twice
        meter.stop()
    finally:
        fake.close()
    t0, t1 = meter.samples[1][0], meter.samples[-2][0]
    joules = meter.energy_between(t0, t1)
    assert joules["package-0"] / (t1 - t0) == pytest.approx(PACKAGE_W, rel=0.15)
    assert joules["psys"] / (t1 - t0) == pytest.approx(PSYS_W, rel=0.15)
    assert meter.counted() == {"package-0"}


def test_power_no_rapl_is_a_clear_refusal(tmp_path: Path, monkeypatch, capsys):
    with pytest.raises(ConfigError) as exc:
        rapl_zones(tmp_path / "empty")
    assert "no RAPL energy counters" in exc.value.message and "Run without --energy" in exc.value.hint
    monkeypatch.setenv(ENV_ROOT, str(tmp_path / "empty"))
    assert main(["run", "-b", "demo", "--energy", "rapl", "--output-dir", str(tmp_path / "r")]) == 2
    assert "no RAPL energy counters" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_power_energy_rapl_demo_run(tmp_path: Path, monkeypatch, capsys):
    fake = FakeRapl(tmp_path / "powercap")
    monkeypatch.setenv(ENV_ROOT, str(fake.root))
    try:
        code = main(["run", "-b", "demo", "-s", "SingleStream", "--min-duration", "2000",
                     "--energy", "rapl", "--output-dir", str(tmp_path / "runs"), "--no-progress"])
    finally:
        fake.close()
    out = capsys.readouterr().out
    assert code in (0, 1), out  # VALID or INVALID; the energy estimate is there either way
    run_json = next((tmp_path / "runs").rglob("run.json"))
    energy = json.loads(run_json.read_text())["energy"]
    assert energy["note"] == NOTE and "not an MLPerf power result" in energy["note"]
    assert energy["counted"] == ["package-0"] and energy["unit"] == "millijoules"
    # the fake counter is written by a thread: on a loaded machine its updates lag, so only roughly
    assert energy["avg_watts"] == pytest.approx(PACKAGE_W, rel=0.3)
    # SingleStream: joules over the LoadGen window per query
    detail = run_json.parent / "mlperf_log_detail.txt"
    from mlharness.loadgen.mllog import parse_detail_log

    queries = parse_detail_log(detail).values["result_query_count"]
    assert energy["metric"] == pytest.approx(energy["joules"] * 1000 / queries, rel=1e-6)
    assert "energy (RAPL estimate, not an MLPerf power result)" in out
