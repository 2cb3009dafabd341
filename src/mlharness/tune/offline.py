"""Find an Offline target QPS by measuring instead of guessing.

An Offline run issues ``1.1 x min_duration x target_qps`` samples in one query and is INVALID if
it finishes before ``min_duration`` (``loadgen/test_settings_internal.cc``, ``loadgen/results.cc``).
So the target must be at least what the system sustains; a higher one only makes the run longer.
We run short probes (kept as ordinary run directories under ``<output_dir>/_tune``), each long
enough to be VALID, and return the measured throughput with a safety margin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from mlharness.errors import RunFailed
from mlharness.runner import RunProgress, execute
from mlharness.spec import RunSpec

PROBE_MS = 1000
MARGIN = 1.5  # a probe that finished early is repeated at least this much higher
#: target = the fastest rate any probe saw x QUICK_MARGIN: a loaded machine's Offline rate swings
#: by 3x from one second to the next; too high a target only lengthens a 2 s --test run
QUICK_MARGIN = 3.0


def probe_offline_qps(spec: RunSpec, start_qps: float = 1000.0, attempts: int = 5,
                      progress: Callable[[RunProgress], None] | None = None) -> float:
    """Measured Offline samples/s of ``spec``'s task, model and backend."""
    target = spec.target_qps or start_qps
    root = Path(spec.output_dir) / "_tune"
    measured = peak = 0.0
    for _ in range(attempts):
        probe = spec.replace(scenario="Offline", mode="performance", valid=False,
                             min_duration=PROBE_MS, min_query_count=None, max_query_count=None,
                             target_qps=target, target_latency=None, server_latency=None,
                             audit_config=None, output_dir=root,
                             purpose="probe")
        record = execute(probe, progress)
        result = record.result
        if record.status != "ok" or result is None or not result.value:
            err = (record.record.error or {}).get("message", "no result")
            raise RunFailed(f"Offline probe failed: {err}", hint=f"see {record.run_dir}")
        measured = result.value
        peak = max(peak, measured)  # a too-short probe's rate is a real measurement too
        if result.valid:
            return peak
        target = max(measured * MARGIN, target * 2)  # too short: it finished early, aim higher
    return peak


def offline_target_qps(spec: RunSpec, progress: Callable[[RunProgress], None] | None = None
                       ) -> float:
    """A target QPS that makes an Offline run of ``spec`` last its min duration."""
    return round(probe_offline_qps(spec, progress=progress) * QUICK_MARGIN, 1)
