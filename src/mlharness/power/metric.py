"""The round's power metric, computed from ``spl.txt`` and the LoadGen detail log the way the
official submission checker does (``submission_checker/checks/power_check.py``
``get_power_metric_check``; units from ``constants.py`` ``POWER_UNIT_DICT``):

* samples are the ``spl.txt`` lines whose time lies strictly inside LoadGen's
  ``power_begin``..``power_end`` (both ``%m-%d-%Y %H:%M:%S.%f``, UTC) with watts > 0;
  mlharness also leaves out watts that are not a finite number (the checker would average an
  ``inf``), fails when no sample is left, and warns when half or more of the window's samples
  were left out (``PowerMetric.warning``);
* Offline / Server: the metric is their average, in watts;
* SingleStream / MultiStream: average watts x window seconds x 1000 / ``result_query_count``,
  in millijoules per query.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from mlharness.errors import HarnessError
from mlharness.loadgen.mllog import METRICS, parse_detail_log
from mlharness.names import MULTISTREAM_SAMPLES_PER_QUERY

TIME_FORMAT = "%m-%d-%Y %H:%M:%S.%f"
#: POWER_UNIT_DICT (submission_checker/constants.py)
UNITS = {"Offline": "Watts", "Server": "Watts", "SingleStream": "millijoules",
         "MultiStream": "millijoules"}
#: samples per query in the efficiency figure (power_check.py)
SAMPLES_PER_QUERY = {"SingleStream": 1, "MultiStream": MULTISTREAM_SAMPLES_PER_QUERY}


@dataclass
class PowerWindow:
    """LoadGen's measured window and what the metric needs from the detail log."""

    begin: datetime
    end: datetime
    scenario: str
    query_count: int | None
    performance: float | None  # the run's performance metric (samples/s for Offline/Server)

    @property
    def seconds(self) -> float:
        return (self.end - self.begin).total_seconds()


@dataclass
class PowerMetric:
    metric: float
    unit: str
    avg_watts: float
    samples: int
    window_s: float
    efficiency: float | None  # samples/s per watt (Offline/Server) or samples per joule
    #: samples in the window left out: not a finite number, or <= 0 W
    bad_samples: int = 0
    #: set when the metric rests on half or fewer of the window's samples
    warning: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def window_from_detail(detail: Path) -> PowerWindow:
    """``power_begin``/``power_end`` and friends from ``mlperf_log_detail.txt``."""
    values = parse_detail_log(detail).values
    if "power_begin" not in values or "power_end" not in values:
        raise HarnessError(f"{detail} has no power_begin/power_end",
                           hint="the LoadGen run did not finish its performance test")
    scenario = str(values.get("effective_scenario") or values.get("requested_scenario") or "")

    key = METRICS.get(scenario, ("result_samples_per_second",))[0]
    perf = values.get(key)
    count = values.get("result_query_count")
    return PowerWindow(datetime.strptime(values["power_begin"], TIME_FORMAT),
                       datetime.strptime(values["power_end"], TIME_FORMAT), scenario,
                       int(count) if count is not None else None,
                       float(perf) if perf is not None else None)


def read_spl(path: Path) -> list[tuple[datetime, float]]:
    """(time, watts) of every sample line in a PTDaemon ``spl.txt``; watts that are not a
    number read as NaN (lines without a readable time are not samples)."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if not line.startswith("Time"):
            continue
        parts = line.split(",")
        try:
            when = datetime.strptime(parts[1], TIME_FORMAT)
        except (IndexError, ValueError):
            continue
        try:
            watts = float(parts[3])
        except (IndexError, ValueError):
            watts = math.nan
        out.append((when, watts))
    return out


def good_sample(watts: float) -> bool:
    return math.isfinite(watts) and watts > 0


def average_in_window(samples: list[tuple[datetime, float]], window: PowerWindow) -> tuple[float, int]:
    """The average of the window's good samples (finite, > 0 W) and how many there are."""
    inside = [w for t, w in samples if window.begin < t < window.end]
    good = [w for w in inside if good_sample(w)]
    if not good:
        bad = f" ({len(inside)} in it, none a finite reading > 0 W)" if inside else ""
        raise HarnessError(f"no valid power samples between {window.begin} and {window.end}{bad}",
                           hint="the analyzer log and the LoadGen log do not overlap (clock "
                                "sync?), or the analyzer sent no usable readings")
    return sum(good) / len(good), len(good)


def minority_warning(good: int, total: int) -> str | None:
    """The warning for a metric resting on half or fewer of the window's samples."""
    if good * 2 > total:
        return None
    return (f"the power metric rests on {good} of the {total} analyzer samples in the "
            f"measured window; the other {total - good} were not finite readings > 0 W")


def power_metric(avg_watts: float, samples: int, window: PowerWindow,
                 scenario: str | None = None) -> PowerMetric:
    """The metric for ``scenario`` (default: the log's) from an average power over the window."""
    scenario = scenario or window.scenario
    if UNITS.get(scenario) == "Watts":  # the throughput scenarios
        eff = window.performance / avg_watts if window.performance else None
        return PowerMetric(avg_watts, UNITS[scenario], avg_watts, samples, window.seconds, eff)
    if scenario not in SAMPLES_PER_QUERY:
        raise HarnessError(f"no power metric for scenario {scenario!r}",
                           hint="use SingleStream, MultiStream, Server or Offline")
    if not window.query_count:
        raise HarnessError("the detail log has no result_query_count",
                           hint="the performance run did not complete")
    mj = avg_watts * window.seconds * 1000 / window.query_count
    return PowerMetric(mj, UNITS[scenario], avg_watts, samples, window.seconds,
                       SAMPLES_PER_QUERY[scenario] * 1000 / mj if mj > 0 else None)


def metric_from_logs(run_dir: Path, scenario: str | None = None) -> PowerMetric:
    """The metric of a testing run directory holding ``spl.txt`` and ``mlperf_log_detail.txt``."""
    window = window_from_detail(run_dir / "mlperf_log_detail.txt")
    samples = read_spl(run_dir / "spl.txt")
    avg, n = average_in_window(samples, window)
    metric = power_metric(avg, n, window, scenario)
    total = sum(1 for t, _ in samples if window.begin < t < window.end)
    metric.bad_samples, metric.warning = total - n, minority_warning(n, total)
    return metric
