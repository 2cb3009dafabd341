"""``--instances N --threads-per-instance M``: core blocks, pinned workers, one backend each."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mlharness.cli.main import main
from mlharness.sut.placement import place
from mlharness.sut.topology import parse_cpu_list


def sysfs(root: Path, nodes: dict[int, str], siblings: dict[int, str] | None = None) -> Path:
    """A tree laid out as Linux's ``/sys/devices/system``: ``node/node<N>/cpulist`` and
    ``cpu/cpu<N>/topology/thread_siblings_list``."""
    for node, cpulist in nodes.items():
        (root / "node" / f"node{node}").mkdir(parents=True)
        (root / "node" / f"node{node}" / "cpulist").write_text(cpulist + "\n")
    for cpu, threads in (siblings or {}).items():
        (root / "cpu" / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (root / "cpu" / f"cpu{cpu}" / "topology" / "thread_siblings_list").write_text(threads)
    return root


def test_blocks_are_consecutive_and_wrap_when_oversubscribed(tmp_path: Path) -> None:
    unknown = {"node_root": tmp_path / "none", "cpu_root": tmp_path / "none"}
    p = place(2, 2, cpus=[0, 1, 2, 3, 4, 5, 6, 7], **unknown)
    assert p.cpus == [[0, 1], [2, 3]] and not p.oversubscribed
    p = place(4, None, cpus=[0, 1, 2, 3, 4, 5, 6, 7], **unknown)
    assert p.threads == 2 and p.cpus[-1] == [6, 7]
    p = place(3, 1, cpus=[4, 5], **unknown)
    assert p.cpus == [[4], [5], [4]] and p.oversubscribed
    assert place(2, 4, cpus=list(range(8)), **unknown).nodes == [[], []]


def test_blocks_stay_inside_numa_nodes_and_a_block_across_is_named(tmp_path: Path) -> None:
    """Linux's node<N>/cpulist files say which cores share a memory controller: blocks are
    spread over the nodes and kept inside one where they fit (2 x 3 on 4 + 4 cores: 0-2 and
    4-6, not 0-2 and 3-5); a block that must span two reaches half its memory across them,
    which the run tells the user."""
    two = sysfs(tmp_path / "a", {0: "0-3", 1: "4-7"})
    cpus = list(range(8))
    p = place(2, 3, cpus=cpus, node_root=two / "node", cpu_root=two / "cpu")
    assert p.cpus == [[0, 1, 2], [4, 5, 6]] and p.nodes == [[0], [1]] and p.notes() == []
    # the default share of 2 instances on a two-socket machine: a socket each
    assert place(2, None, cpus=cpus, node_root=two / "node").cpus == [cpus[:4], cpus[4:]]
    six = sysfs(tmp_path / "b", {0: "0-5", 1: "6-11"})
    p = place(3, 4, cpus=list(range(12)), node_root=six / "node", cpu_root=six / "cpu")
    assert p.cpus == [[0, 1, 2, 3], [6, 7, 8, 9], [4, 5, 10, 11]]
    assert p.nodes == [[0], [1], [0, 1]] and not p.oversubscribed
    [note] = p.notes()
    assert "instance 3: cores 4-5,10-11 on nodes [0, 1]" in note


def test_blocks_take_a_thread_per_physical_core_while_there_are_enough(tmp_path: Path) -> None:
    """Two sockets of 4 cores with two hardware threads each, numbered as Linux does on Xeons
    (core c's threads are c and c + 8): blocks that need no more threads than a node has cores
    run one thread per core; more blocks take whole cores, so no two share one."""
    siblings = {c: f"{c % 8},{c % 8 + 8}\n" for c in range(16)}
    root = sysfs(tmp_path, {0: "0-3,8-11", 1: "4-7,12-15"}, siblings)
    where = {"cpus": list(range(16)), "node_root": root / "node", "cpu_root": root / "cpu"}
    assert place(1, 4, **where).cpus == [[0, 1, 2, 3]]
    assert place(2, 4, **where).cpus == [[0, 1, 2, 3], [4, 5, 6, 7]]
    p = place(4, 4, **where)
    assert p.cpus == [[0, 8, 1, 9], [2, 10, 3, 11], [4, 12, 5, 13], [6, 14, 7, 15]]
    assert p.nodes == [[0], [0], [1], [1]] and p.notes() == []
    assert place(8, 2, **where).cpus[:2] == [[0, 8], [1, 9]]
    p = place(5, 4, **where)  # 20 threads on 16: the fifth wraps around onto the first
    assert p.oversubscribed and p.cpus[4] == p.cpus[0]


def test_an_instance_loads_on_its_own_cores(tmp_path: Path) -> None:
    """An instance with a model of its own is loaded with the loading thread on its block: the
    threads the runtime starts there stay on it (OpenVINO's streams ran on every core before)
    and Linux puts the weights it writes in that block's NUMA node; the loading thread gets its
    cores back after."""
    pytest.importorskip("openvino", reason="the openvino extra is not installed")
    from mlharness.sut.assemble import build_instances
    from mlharness.spec import RunSpec

    def threads() -> dict[str, set[int]]:
        out = {}
        for task in Path("/proc/self/task").iterdir():
            status = (task / "status").read_text()
            allowed = status.split("Cpus_allowed_list:")[1].split()[0]
            out[task.name] = set(parse_cpu_list(allowed))
        return out

    before = threads()
    mine = os.sched_getaffinity(0)
    spec = RunSpec.model_validate({"benchmark": "demo", "backend": "openvino", "instances": 2,
                                   "threads_per_instance": 1, "cache_dir": str(tmp_path)})
    _, instances, placement = build_instances(spec)
    started = {tid: cpus for tid, cpus in threads().items() if tid not in before}
    assert os.sched_getaffinity(0) == mine
    blocks = [set(block) for block in placement.cpus]
    assert started and all(cpus in blocks for cpus in started.values()), (started, blocks)
    assert placement.to_dict()["loaded_on_own_cores"] is True


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
