"""What Linux says about the cores: the NUMA node of each (``/sys/devices/system/node``) and the
hardware threads that share a physical core (``/sys/devices/system/cpu``)."""

from __future__ import annotations

from pathlib import Path

#: where Linux lists each NUMA node's cores (``node<N>/cpulist``, e.g. ``0-27,56-83``)
NODE_ROOT = Path("/sys/devices/system/node")
#: where Linux lists each core's hardware threads (``cpu<N>/topology/thread_siblings_list``)
CPU_ROOT = Path("/sys/devices/system/cpu")


def parse_cpu_list(text: str) -> list[int]:
    """Linux's cpu list format, ``0-27,56-83``, as the cores it names."""
    out: list[int] = []
    for part in filter(None, text.strip().split(",")):
        first, _, last = part.partition("-")
        out += range(int(first), int(last or first) + 1)
    return out


def numa_nodes(root: Path = NODE_ROOT) -> dict[int, int]:
    """``{core: NUMA node}`` as Linux lists them; empty where it does not."""
    node_of: dict[int, int] = {}
    for path in sorted(root.glob("node[0-9]*/cpulist")):
        try:
            cores = parse_cpu_list(path.read_text())
        except (OSError, ValueError):
            continue
        node_of.update(dict.fromkeys(cores, int(path.parent.name[len("node"):])))
    return node_of


def physical_cores(cpus: list[int], root: Path = CPU_ROOT) -> list[list[int]]:
    """``cpus`` grouped by physical core (SMT siblings together, in the order their first
    thread comes in ``cpus``); a core whose siblings Linux does not list stands alone."""
    wanted = set(cpus)
    cores: dict[tuple[int, ...], list[int]] = {}
    for cpu in cpus:
        try:
            text = (root / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text()
            siblings = tuple(sorted(c for c in parse_cpu_list(text) if c in wanted)) or (cpu,)
        except (OSError, ValueError):
            siblings = (cpu,)
        cores.setdefault(siblings if cpu in siblings else (cpu,), []).append(cpu)
    return list(cores.values())


def cpu_ranges(cpus: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``0-2,5`` (Linux's cpu list format)."""
    out: list[str] = []
    for c in sorted(cpus):
        if out and out[-1].split("-")[-1] == str(c - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out)
