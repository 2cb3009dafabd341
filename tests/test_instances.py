"""``--instances N --threads-per-instance M``: core blocks, pinned workers, one backend each."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mlharness.cli.main import main
from mlharness.sut.placement import place


def test_blocks_are_consecutive_and_wrap_when_oversubscribed() -> None:
    p = place(2, 2, cpus=[0, 1, 2, 3, 4, 5, 6, 7])
    assert p.cpus == [[0, 1], [2, 3]] and not p.oversubscribed
    p = place(4, None, cpus=[0, 1, 2, 3, 4, 5, 6, 7])
    assert p.threads == 2 and p.cpus[-1] == [6, 7]
    p = place(3, 1, cpus=[4, 5])
    assert p.cpus == [[4], [5], [4]] and p.oversubscribed


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_demo_with_two_pinned_instances(tmp_path: Path, backend: str) -> None:
    if backend == "openvino":
        pytest.importorskip("openvino", reason="the openvino extra is not installed")
    runs = tmp_path / "runs"
    code = main(["run", "-b", "demo", "--mode", "accuracy", "--backend", backend,
                 "--instances", "2", "--threads-per-instance", "1", "--batch-size", "16",
                 "--no-progress", "--output-dir", str(runs)])
    [run_dir] = list((runs / "demo").iterdir())
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "ok" and code == 0
    assert record["spec"]["instances"] == 2 and record["spec"]["threads_per_instance"] == 1
    placement = record["sut"]["placement"]
    cpus = sorted(os.sched_getaffinity(0))
    assert placement["cpus"] == [[cpus[0]], [cpus[1 % len(cpus)]]]
    assert record["sut"]["workers"] == 2
    assert record["backend"]["cpus"] == placement["cpus"][0]
    assert placement["shared_model"] is False  # separate sessions: each its own thread pool
    assert record["accuracy"]["passed"] is True
