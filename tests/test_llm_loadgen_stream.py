"""LoadGen (Server, token latencies) driving the streaming client against the scripted server:
LoadGen's TTFT/TPOT equal the injected ones, its accuracy log holds the server's token ids."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from llm_server import Script, ScriptedServer

import mlharness
from mlharness.llm.accuracy_log import read_entries
from mlharness import rules

HERE = Path(__file__).resolve().parent
SCRIPT = Script(ttft_s=0.3, gap_s=0.05, n_tokens=10, first_id=300)


def _run(tmp_path: Path, mode: str, queries: int) -> tuple[dict, list]:
    src = str(Path(mlharness.__file__).resolve().parents[1])  # the child imports this mlharness
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (src, os.environ.get("PYTHONPATH")) if p))
    with ScriptedServer(SCRIPT) as server:
        proc = subprocess.run(
            [sys.executable, str(HERE / "llm_loadgen_stream.py"), str(tmp_path), server.url,
             str(queries), "20", mode], check=False, capture_output=True, text=True, timeout=120,
            env=env)
        requests = list(server.seen)
    assert proc.returncode == 0, proc.stderr[-2000:]
    values = {}
    for line in (tmp_path / "mlperf_log_detail.txt").read_text().splitlines():
        if ":::MLLOG" in line:
            entry = json.loads(line.split(":::MLLOG", 1)[1])
            values[entry["key"]] = entry["value"]
    return values, requests


def test_loadgen_measures_the_injected_token_latencies(tmp_path):
    values, seen = _run(tmp_path, "performance", 40)
    assert len(seen) == 40 and values["requested_use_token_latencies"] is True
    ttft = values["result_first_token_mean_latency_ns"] / 1e9
    tpot = values["result_time_to_output_token_mean"] / 1e9
    served_ttft = statistics.mean(s.ttft_s() for s in seen)
    served_tpot = statistics.mean(s.tpot_s() for s in seen)
    assert ttft == pytest.approx(served_ttft, rel=0.15)
    assert tpot == pytest.approx(served_tpot, rel=0.15)
    # never less than injected; equal to it, and within the limits, unless the machine made the
    # scripted server itself late (then the comparison with what it really sent is what holds)
    assert ttft >= SCRIPT.ttft_s * 0.85 and tpot >= SCRIPT.gap_s * 0.85, (ttft, tpot)
    if abs(served_ttft / SCRIPT.ttft_s - 1) <= 0.1 and abs(served_tpot / SCRIPT.gap_s - 1) <= 0.1:
        assert ttft == pytest.approx(SCRIPT.ttft_s, rel=0.15)
        assert tpot == pytest.approx(SCRIPT.gap_s, rel=0.15)
        limit = rules.load("v6.1").benchmark("llama3.1-8b").token_limit("Server")
        assert limit.passes(values["result_first_token_99.00_percentile_latency_ns"],
                            values["result_time_per_output_token_99.00_percentile_ns"])
        summary = (tmp_path / "mlperf_log_summary.txt").read_text()
        assert "Performance constraints satisfied : Yes" in summary


def test_loadgen_logs_the_streamed_token_ids(tmp_path):
    _run(tmp_path, "accuracy", 16)
    entries = read_entries(tmp_path / "mlperf_log_accuracy.json")
    assert sorted(e.qsl_idx for e in entries) == list(range(16))
    for e in entries:
        assert e.tokens("int32").tolist() == list(range(300, 310)) and e.token_count == 10
        assert e.first_tokens("int32").tolist() == [300]
