"""``--energy rapl``: an energy estimate from the CPU's RAPL counters (and NVML where a GPU is
present) over LoadGen's measured window. Informational only: no power analyzer, no PTDaemon,
so never an MLPerf power result.

RAPL zones are read from the Linux powercap tree (``/sys/class/powercap/intel-rapl:N`` with
``name``, ``energy_uj`` and ``max_energy_range_uj``; AMD CPUs use the same driver). Top-level
package zones are summed; ``psys`` (the whole platform, which contains the packages) and
sub-zones (core, uncore, dram) are recorded but not added, so nothing is counted twice.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from datetime import timezone
from pathlib import Path
from typing import Any

from mlharness.errors import ConfigError, HarnessError
from mlharness.power.metric import power_metric, window_from_detail

POWERCAP = Path("/sys/class/powercap")
ENV_ROOT = "MLHARNESS_POWERCAP_ROOT"  # another powercap tree (tests use a fake one)
NOTE = ("estimate from RAPL/NVML energy counters: informational, not an MLPerf power result "
        "(no power analyzer, no PTDaemon)")
INTERVAL_S = 0.25


@dataclass
class RaplZone:
    name: str  # e.g. package-0, psys, package-0/dram
    path: Path
    max_uj: int
    counted: bool  # part of the total


def rapl_zones(root: Path | None = None) -> list[RaplZone]:
    """The readable RAPL zones under ``root``; ConfigError when there are none."""
    root = Path(os.environ.get(ENV_ROOT) or root or POWERCAP)
    tops = sorted(root.glob("intel-rapl:*")) if root.is_dir() else []
    if not tops:
        raise ConfigError(f"no RAPL energy counters under {root} (intel-rapl:*)",
                          hint="RAPL needs a bare-metal Intel or AMD CPU with the powercap driver "
                               "(modprobe intel_rapl_common); VMs and containers rarely expose it. "
                               "Run without --energy")
    zones = []
    for zone in tops:
        if zone.name.count(":") != 1:
            continue  # sub-zones are read below, under their package
        name = (zone / "name").read_text().strip() if (zone / "name").is_file() else zone.name
        zones.append(RaplZone(name, zone, _read_int(zone / "max_energy_range_uj"),
                              counted=name != "psys"))
        for sub in sorted(zone.glob(f"{zone.name}:*")):
            sub_name = (sub / "name").read_text().strip() if (sub / "name").is_file() else sub.name
            zones.append(RaplZone(f"{name}/{sub_name}", sub,
                                  _read_int(sub / "max_energy_range_uj"), counted=False))
    for z in zones:
        try:
            _read_int(z.path / "energy_uj")
        except PermissionError:
            raise ConfigError(f"{z.path / 'energy_uj'} is not readable by this user",
                              hint="RAPL counters are root-only on most kernels: run as root or "
                                   "chmod o+r the energy_uj files") from None
    return zones


def _read_int(path: Path) -> int:
    return int(path.read_text().strip())


class _Nvml:
    """Total energy per NVIDIA GPU (mJ) through pynvml, when importable and a GPU is present."""

    def __init__(self) -> None:
        self.handles: list[Any] = []
        try:
            import pynvml  # type: ignore[import-not-found]

            pynvml.nvmlInit()
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
                self.handles.append(handle)
            self.lib = pynvml
        except Exception:  # no pynvml, no driver, no GPU, or no energy counter: no GPU zones
            self.handles = []

    def read(self) -> dict[str, float]:
        return {f"gpu-{i}": self.lib.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0
                for i, h in enumerate(self.handles)}


@dataclass
class EnergyMeter:
    """Samples cumulative energy (J, wrap-arounds undone) per zone in a background thread."""

    zones: list[RaplZone]
    nvml: _Nvml | None = None
    samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)

    @classmethod
    def open(cls, kind: str, root: Path | None = None) -> EnergyMeter:
        if kind != "rapl":
            raise ConfigError(f"unknown energy source {kind!r}", hint="use --energy rapl")
        return cls(rapl_zones(root), _Nvml())

    def __post_init__(self) -> None:
        self._last: dict[str, int] = {}
        self._offset: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def read(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for z in self.zones:
            raw = _read_int(z.path / "energy_uj")
            if z.name in self._last and raw < self._last[z.name]:
                self._offset[z.name] = self._offset.get(z.name, 0) + (z.max_uj or 2**32)
            self._last[z.name] = raw
            out[z.name] = (raw + self._offset.get(z.name, 0)) / 1e6
        if self.nvml and self.nvml.handles:
            out.update(self.nvml.read())
        return out

    def sample(self) -> None:
        try:
            self.samples.append((time.time(), self.read()))
        except (OSError, ValueError):
            pass  # a counter could not be read this time: the next sample will do

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL_S):
            self.sample()

    def start(self) -> None:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="energy-meter", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=2)
        self.sample()

    def energy_between(self, t0: float, t1: float) -> dict[str, float]:
        """Joules per zone between two wall-clock times (linear between samples)."""
        return {name: _at(self.samples, t1, name) - _at(self.samples, t0, name)
                for name in self.samples[0][1]}

    def counted(self) -> set[str]:
        return {z.name for z in self.zones if z.counted} | {
            n for n in (self.samples[0][1] if self.samples else {}) if n.startswith("gpu-")}

    def summary(self, detail: Path, scenario: str | None = None) -> dict[str, Any]:
        """The estimate over LoadGen's power window in ``detail`` (mlperf_log_detail.txt)."""
        window = window_from_detail(detail)
        t0 = window.begin.replace(tzinfo=timezone.utc).timestamp()
        t1 = window.end.replace(tzinfo=timezone.utc).timestamp()
        if len(self.samples) < 2 or self.samples[0][0] > t0 or self.samples[-1][0] < t1:
            raise HarnessError("the energy samples do not cover the LoadGen window",
                               hint="the meter must run for the whole test")
        joules = self.energy_between(t0, t1)
        total = sum(v for k, v in joules.items() if k in self.counted())
        avg = total / window.seconds if window.seconds > 0 else 0.0
        inside = sum(1 for t, _ in self.samples if t0 < t < t1)
        metric = power_metric(avg, inside, window, scenario)
        return {"kind": "rapl-estimate", "note": NOTE, "joules": round(total, 6),
                "zones_joules": {k: round(v, 6) for k, v in joules.items()},
                "counted": sorted(self.counted()), **metric.to_dict()}

    def attach(self, run_dir: Path, record: Any) -> None:
        """Add ``energy`` to the run's record (``mlharness.record.RunRecord``) from its detail
        log, and save it."""
        detail = run_dir / "mlperf_log_detail.txt"
        try:
            record.energy = self.summary(detail, record.spec.scenario)
        except HarnessError as exc:
            record.energy = {"kind": "rapl-estimate", "note": NOTE, "error": exc.message}
        record.save(run_dir)


def _at(samples: list[tuple[float, dict[str, float]]], t: float, name: str) -> float:
    """A zone's cumulative joules at time ``t``, interpolated between the nearest samples."""
    before = [s for s in samples if s[0] <= t]
    after = [s for s in samples if s[0] >= t]
    a = before[-1] if before else samples[0]
    b = after[0] if after else samples[-1]
    if b[0] == a[0]:
        return a[1][name]
    return a[1][name] + (b[1][name] - a[1][name]) * (t - a[0]) / (b[0] - a[0])
