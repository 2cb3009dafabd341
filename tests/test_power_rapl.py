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
MAX_UJ = 100_000_000  # small range: wraps every 2.5 s at 40 W (real ranges take minutes)


def _zone(path: Path, name: str) -> Path:
    path.mkdir(parents=True)
    (path / "name").write_text(name + "\n")
    (path / "max_energy_range_uj").write_text(f"{MAX_UJ}\n")
    (path / "energy_uj").write_text("0\n")
    return path


class FakeRapl:
    """intel-rapl:0 (package-0 with a dram sub-zone) and intel-rapl:1 (psys), counting up at
    fixed watts in a thread, wrapping at max_energy_range_uj like the hardware."""

    def __init__(self, root: Path, running: bool = True) -> None:
        self.root = root
        self.files = {_zone(root / "intel-rapl:0", "package-0") / "energy_uj": PACKAGE_W,
                      _zone(root / "intel-rapl:0" / "intel-rapl:0:0", "dram") / "energy_uj": DRAM_W,
                      _zone(root / "intel-rapl:1", "psys") / "energy_uj": PSYS_W}
        self.t0 = time.time()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        if running:
            self.thread.start()

    def write_at(self, dt: float) -> None:
        for f, watts in self.files.items():  # atomically, as sysfs reads are
            tmp = f.with_suffix(".tmp")
            tmp.write_text(f"{round(watts * dt * 1e6) % MAX_UJ}\n")
            os.replace(tmp, f)

    def _run(self) -> None:
        while not self.stop.wait(0.02):
            self.write_at(time.time() - self.t0)

    def close(self) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()


def test_power_rapl_zones_and_wraparound(tmp_path: Path):
    """Deterministic: the counters are set for simulated times 0, 0.2, 0.4, … s and read once
    each (the wrap-around logic sees every wrap of the 100 J range, as 4 Hz sampling does)."""
    fake = FakeRapl(tmp_path / "powercap", running=False)
    zones = rapl_zones(fake.root)
    assert [(z.name, z.counted) for z in zones] == [
        ("package-0", True), ("package-0/dram", False), ("psys", False)]
    meter = EnergyMeter(zones)
    for k in range(31):  # 6 s: the package counter wraps twice, psys three times
        fake.write_at(0.2 * k)
        meter.samples.append((0.2 * k, meter.read()))
    joules = meter.energy_between(0.3, 5.9)  # between samples: interpolated
    assert joules["package-0"] == pytest.approx(PACKAGE_W * 5.6)
    assert joules["package-0/dram"] == pytest.approx(DRAM_W * 5.6)
    assert joules["psys"] == pytest.approx(PSYS_W * 5.6)
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
    # wiring only: the fake counter is written by a thread, whose updates lag on a loaded
    # machine (the arithmetic is tested exactly above)
    assert PACKAGE_W / 2 < energy["avg_watts"] < PACKAGE_W * 2
    # SingleStream: joules over the LoadGen window per query
    detail = run_json.parent / "mlperf_log_detail.txt"
    from mlharness.loadgen.mllog import parse_detail_log

    queries = parse_detail_log(detail).values["result_query_count"]
    assert energy["metric"] == pytest.approx(energy["joules"] * 1000 / queries, rel=1e-6)
    assert "energy (RAPL estimate, not an MLPerf power result)" in out
