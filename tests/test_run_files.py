"""The files a run directory holds: LoadGen's trace only when asked for."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlharness.runner import execute
from mlharness.spec import RunSpec


@pytest.mark.parametrize("trace", [False, True])
def test_trace_file_only_with_trace(tmp_path: Path, trace: bool) -> None:
    record = execute(RunSpec(benchmark="demo", scenario="SingleStream", mode="performance",
                             target_latency=0.05, min_duration=200, trace=trace,
                             output_dir=tmp_path))
    assert record.status == "ok"
    files = {p.name for p in record.run_dir.iterdir()}
    assert {"mlperf_log_summary.txt", "mlperf_log_detail.txt", "run.json"} <= files
    assert ("mlperf_log_trace.json" in files) is trace
    if trace:  # LoadGen's Chrome-trace events (not strict JSON: some args are double-quoted)
        text = (record.run_dir / "mlperf_log_trace.json").read_text()
        assert text.startswith('{"traceEvents":[') and '"name":"IssueQuery"' in text
