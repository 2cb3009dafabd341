"""Where backend instances run: one block of cores per instance (``--instances N``,
``--threads-per-instance M``), taken in order from the cores this process may use, and what a
user should know about the blocks (cores shared between them, a block across NUMA nodes)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

#: where Linux lists each NUMA node's cores (``node<N>/cpulist``, e.g. ``0-27,56-83``)
NODE_ROOT = Path("/sys/devices/system/node")


@dataclass
class Placement:
    instances: int
    threads: int  # per instance
    cpus: list[list[int]] = field(default_factory=list)  # per instance
    oversubscribed: bool = False  # more threads than cores: blocks wrap around and share
    shared_model: bool = False  # the instances call one loaded model (the backend's load_shared)
    nodes: list[list[int]] = field(default_factory=list)  # per instance: its cores' NUMA nodes

    def notes(self) -> list[str]:
        """What slows the instances down as placed, said once under the result."""
        out = []
        if self.oversubscribed:
            cores = len({c for block in self.cpus for c in block})
            out.append(f"{self.instances} instances x {self.threads} threads on {cores} cores: "
                       "the blocks share cores (oversubscribed), which slows every instance; "
                       "lower --instances or --threads-per-instance")
        split = [k for k, nodes in enumerate(self.nodes) if len(nodes) > 1]
        if split:
            k = split[0]
            out.append(f"{len(split)} instance(s) run on cores of several NUMA nodes (instance "
                       f"{k + 1}: cores {_ranges(self.cpus[k])} on nodes {self.nodes[k]}), "
                       "reaching memory across the nodes; choose --threads-per-instance to "
                       "divide each node's cores")
        return out

    def to_dict(self) -> dict:
        return {"instances": self.instances, "threads_per_instance": self.threads,
                "cpus": self.cpus, "oversubscribed": self.oversubscribed,
                "shared_model": self.shared_model, "numa_nodes": self.nodes,
                "notes": self.notes()}


def available_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def place(instances: int, threads_per_instance: int | None,
          cpus: list[int] | None = None, node_root: Path = NODE_ROOT) -> Placement:
    """Consecutive blocks of ``threads_per_instance`` cores (default: an equal share)."""
    cpus = cpus or available_cpus()
    m = threads_per_instance or max(1, len(cpus) // instances)
    blocks = [[cpus[(k * m + j) % len(cpus)] for j in range(m)] for k in range(instances)]
    node_of = numa_nodes(node_root)
    nodes = [sorted({node_of[c] for c in block if c in node_of}) for block in blocks]
    return Placement(instances, m, blocks, instances * m > len(cpus), nodes=nodes)


def numa_nodes(root: Path = NODE_ROOT) -> dict[int, int]:
    """``{core: NUMA node}`` as Linux lists them; empty where it does not."""
    node_of: dict[int, int] = {}
    for path in sorted(root.glob("node[0-9]*/cpulist")):
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        node = int(path.parent.name[len("node"):])
        for part in filter(None, text.split(",")):
            first, _, last = part.partition("-")
            node_of.update({c: node for c in range(int(first), int(last or first) + 1)})
    return node_of


def _ranges(cpus: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``0-2,5``."""
    out: list[str] = []
    for c in sorted(cpus):
        if out and out[-1].split("-")[-1] == str(c - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out)


def pin_current_thread(cpus: list[int]) -> None:
    """Pin the calling thread (Linux: pid 0 is the calling thread) to ``cpus``."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)
