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


def test_blocks_across_numa_nodes_are_named(tmp_path: Path) -> None:
    """Linux's node<N>/cpulist files say which cores share a memory controller; a block that
    spans two nodes reaches half its memory across them, which the run tells the user."""
    for node, cpulist in ((0, "0-3\n"), (1, "4-7\n")):
        (tmp_path / f"node{node}").mkdir()
        (tmp_path / f"node{node}" / "cpulist").write_text(cpulist)
    cpus = list(range(8))
    assert place(2, 4, cpus=cpus, node_root=tmp_path).notes() == []
    p = place(2, 3, cpus=cpus, node_root=tmp_path)
    assert p.nodes == [[0], [0, 1]]
    [note] = p.notes()
    assert "instance 2: cores 3-5 on nodes [0, 1]" in note
    assert place(2, 4, cpus=cpus, node_root=tmp_path / "none").nodes == [[], []]


def test_oversubscribed_instances_are_told(tmp_path: Path,
                                           capsys: pytest.CaptureFixture) -> None:
    cores = len(os.sched_getaffinity(0))
    runs = tmp_path / "runs"
    code = main(["run", "-b", "demo", "--mode", "accuracy", "--instances", "2",
                 "--threads-per-instance", str(cores), "--no-progress",
                 "--output-dir", str(runs)])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0, out
    assert f"note: 2 instances x {cores} threads on {cores} cores: the blocks share cores" in out
    [run_dir] = list((runs / "demo").iterdir())
    placement = json.loads((run_dir / "run.json").read_text())["sut"]["placement"]
    assert placement["oversubscribed"] is True and placement["notes"]


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
