"""Where backend instances run: one block of cores per instance (``--instances N``,
``--threads-per-instance M``), taken in order from the cores this process may use."""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass
class Placement:
    instances: int
    threads: int  # per instance
    cpus: list[list[int]] = field(default_factory=list)  # per instance
    oversubscribed: bool = False  # more threads than cores: blocks wrap around and share
    shared_model: bool = False  # the instances call one loaded model (the backend's load_shared)

    def to_dict(self) -> dict:
        return {"instances": self.instances, "threads_per_instance": self.threads,
                "cpus": self.cpus, "oversubscribed": self.oversubscribed,
                "shared_model": self.shared_model}


def available_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def place(instances: int, threads_per_instance: int | None,
          cpus: list[int] | None = None) -> Placement:
    """Consecutive blocks of ``threads_per_instance`` cores (default: an equal share)."""
    cpus = cpus or available_cpus()
    m = threads_per_instance or max(1, len(cpus) // instances)
    blocks = [[cpus[(k * m + j) % len(cpus)] for j in range(m)] for k in range(instances)]
    return Placement(instances, m, blocks, instances * m > len(cpus))


def pin_current_thread(cpus: list[int]) -> None:
    """Pin the calling thread (Linux: pid 0 is the calling thread) to ``cpus``."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)
