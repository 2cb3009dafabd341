"""Where backend instances run: one block of cores per instance (``--instances N``,
``--threads-per-instance M``), kept inside a NUMA node where the blocks fit, one hardware thread
per physical core while there are enough cores, and what a user should know about the blocks
(cores shared between them, a block across NUMA nodes)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from mlharness.sut.topology import CPU_ROOT, NODE_ROOT, cpu_ranges, numa_nodes, physical_cores


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
                       f"{k + 1}: cores {cpu_ranges(self.cpus[k])} on nodes {self.nodes[k]}), "
                       "reaching memory across the nodes; choose --threads-per-instance to "
                       "divide each node's cores")
        return out

    def to_dict(self) -> dict:
        # an instance with a model of its own loads it on its own block: the weights land in
        # its node's memory (Linux places a page where the thread that first writes it runs)
        return {"instances": self.instances, "threads_per_instance": self.threads,
                "cpus": self.cpus, "oversubscribed": self.oversubscribed,
                "shared_model": self.shared_model, "numa_nodes": self.nodes,
                "loaded_on_own_cores": not self.shared_model, "notes": self.notes()}


def available_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def place(instances: int, threads_per_instance: int | None, cpus: list[int] | None = None,
          node_root: Path = NODE_ROOT, cpu_root: Path = CPU_ROOT) -> Placement:
    """Blocks of ``threads_per_instance`` cores (default: an equal share of ``cpus``): spread
    over the NUMA nodes by the cores each has free, inside one node where they fit, then across
    nodes from the cores left over, then wrapping around (oversubscribed)."""
    cpus = cpus or available_cpus()
    m = threads_per_instance or max(1, len(cpus) // instances)
    node_of = numa_nodes(node_root)
    if all(c in node_of for c in cpus):
        groups = [[c for c in cpus if node_of[c] == n] for n in sorted({node_of[c] for c in cpus})]
    else:  # Linux does not say (or not for every core): one group, in the given order
        groups = [cpus]
    blocks: list[list[int]] = []
    rest: list[int] = []
    for group, count in zip(groups, _spread(instances, [len(g) for g in groups], m)):
        order = _core_order(physical_cores(group, cpu_root), count * m)
        blocks += [order[k * m:(k + 1) * m] for k in range(count)]
        rest += order[count * m:]
    while len(blocks) < instances and len(rest) >= m:  # across nodes, from what is left
        blocks.append(rest[:m])
        rest = rest[m:]
    ring = [c for block in blocks for c in block] + rest
    while len(blocks) < instances:  # more threads than cores: wrap around
        k = len(blocks)
        blocks.append([ring[(k * m + j) % len(ring)] for j in range(m)])
    nodes = [sorted({node_of[c] for c in block if c in node_of}) for block in blocks]
    return Placement(instances, m, blocks, instances * m > len(cpus), nodes=nodes)


def _spread(instances: int, sizes: list[int], m: int) -> list[int]:
    """How many blocks of ``m`` each node takes: each next one to the node with the most cores
    free (the lower-numbered on a tie), while one fits anywhere."""
    counts = [0] * len(sizes)
    for _ in range(instances):
        free = [size - count * m for size, count in zip(sizes, counts)]
        best = max(range(len(sizes)), key=lambda i: (free[i], -i))
        if free[best] < m:
            break
        counts[best] += 1
    return counts


def _core_order(cores: list[list[int]], used: int) -> list[int]:
    """The order a node's blocks take its hardware threads: one per physical core first when
    the blocks need no more threads than there are cores; otherwise core by core, so two
    blocks share no physical core."""
    if used <= len(cores):
        depth = max(map(len, cores), default=0)
        return [core[t] for t in range(depth) for core in cores if t < len(core)]
    return [c for core in cores for c in core]


@contextmanager
def pinned(cpus: list[int] | None) -> Iterator[None]:
    """Run the body with the calling thread on ``cpus`` (nothing changes for None), then give
    it back the cores it had."""
    if not cpus or not hasattr(os, "sched_getaffinity"):
        yield
        return
    before = sorted(os.sched_getaffinity(0))
    pin_current_thread(cpus)
    try:
        yield
    finally:
        pin_current_thread(before)


def pin_current_thread(cpus: list[int]) -> None:
    """Pin the calling thread (Linux: pid 0 is the calling thread) to ``cpus``."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)
