"""The network path (`mlharness serve` + `--backend remote`) and Ray against in-process, side by side.

1. No-op backend on a task with no data (``null_task``): Server max VALID QPS in-process vs one
   node on loopback (goal: ratio >= 0.5), and SingleStream mean latency (goal: <= 1 ms added).
2. Scaling 1 -> 2 nodes and 1 -> 2 Ray replicas, Offline, on the demo and on a ResNet50-shaped
   model (``resnet50_graph.py``, random weights, synthetic images), with the CPU seconds each
   process used (LoadGen side, nodes / actors).

    .venv/bin/python benchmarks/network.py [--duration-ms 3000] [--skip-ray] [--skip-resnet]

Everything runs on 127.0.0.1; nodes and the Ray head are started and stopped here.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from distributed_support import NodeProcess, RayHead  # noqa: E402
from mlharness.runner import execute  # noqa: E402
from mlharness.spec import RunSpec  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
MIN_QUERIES = 3000  # per Server probe: enough for LoadGen's p99 early-stopping estimate


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (and its reaped children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / TICK


class CpuWatch:
    """Samples the CPU seconds of some processes until stopped (they may exit meanwhile)."""

    def __init__(self, pids: callable) -> None:
        self.pids = pids
        self.last: dict[int, float] = {}
        self.first: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            for pid in self.pids():
                try:
                    value = cpu_seconds(pid)
                except (OSError, IndexError):
                    continue
                self.first.setdefault(pid, value)
                self.last[pid] = value

    def stop(self) -> list[float]:
        self._stop.set()
        self._thread.join()
        return sorted((self.last[p] - self.first[p] for p in self.last), reverse=True)


def run(spec: RunSpec) -> tuple[object, float, float]:
    """Execute; return the result, the wall seconds and the LoadGen side's CPU seconds (this
    process's spawned run child, measured as the children's rusage delta)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    record = execute(spec)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if record.result is None:
        raise RuntimeError(f"run failed: {record.data.get('error')}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return record.result, wall, cpu


def probe(spec: RunSpec) -> bool:
    """One Server probe; prints its outcome to stderr."""
    result, _, _ = run(spec)
    print(f"  {spec.backend:6} {spec.target_qps:8,.0f} QPS: p99 "
          f"{result.latencies_ms.get('p99.00', float('nan')):.2f} ms, "
          f"{'VALID' if result.valid else 'INVALID ' + '; '.join(result.reasons)[:120]}",
          file=sys.stderr)
    return result.valid


def max_valid_server_qps(make: callable, start: float, duration_ms: int) -> float:
    """Halve the target until VALID (or double it until INVALID), then bisect three times; the
    highest VALID target (0 if even start/16 is INVALID)."""
    qps = start
    for _ in range(4):
        if probe(make(qps, duration_ms)):
            break
        qps /= 2
    else:
        return 0.0
    good, bad, qps = qps, None, qps * 2
    for _ in range(14):
        if probe(make(qps, duration_ms)):
            good, qps = qps, qps * 2
        else:
            bad = qps
            break
    if bad is None:
        return good
    for _ in range(3):
        mid = (good + bad) / 2
        if probe(make(mid, duration_ms)):
            good = mid
        else:
            bad = mid
    return good


def overhead(root: Path, duration_ms: int, bound_ms: float) -> None:
    env_path = f"{HERE}:{os.environ.get('PYTHONPATH', '')}"
    os.environ["PYTHONPATH"] = env_path  # the node imports null_task too
    node = NodeProcess(root, "null_task:create", "--backend", "noop")
    try:
        node.wait_ready()

        def spec(backend: dict, **kw) -> RunSpec:
            return RunSpec(benchmark="null_task:create", output_dir=root / "runs", **backend, **kw)

        local = {"backend": "noop"}
        remote = {"backend": "remote", "backend_option": {"endpoints": [node.url]}}

        def server(backend: dict) -> callable:
            # early stopping at p99 needs a few thousand queries whatever the rate
            return lambda qps, ms: spec(backend, scenario="Server", target_qps=qps,
                                        server_latency=bound_ms,
                                        min_duration=max(ms, int(MIN_QUERIES / qps * 1000)),
                                        min_query_count=MIN_QUERIES)

        q_local = max_valid_server_qps(server(local), 1000, duration_ms)
        q_remote = max_valid_server_qps(server(remote), 1000, duration_ms)
        ss = {}
        for name, backend in (("local", local), ("remote", remote)):
            result, _, _ = run(spec(backend, scenario="SingleStream", target_latency=0.05,
                                    min_duration=duration_ms))
            ss[name] = result.latencies_ms["mean"]
    finally:
        node.stop()
    print("\n1. network path vs in-process (no-op backend, null task, one node on loopback)")
    print(f"{'':34}{'in-process':>12}{'remote':>12}")
    label = f"Server max VALID QPS ({bound_ms:g} ms p99)"
    print(f"{label:34}{q_local:>12,.0f}{q_remote:>12,.0f}   "
          f"ratio {q_remote / max(q_local, 1e-9):.2f} (goal >= 0.5)")
    print(f"{'SingleStream mean latency (ms)':34}{ss['local']:>12.3f}{ss['remote']:>12.3f}   "
          f"added {ss['remote'] - ss['local']:+.3f} ms (goal <= 1 ms)")


def scaling(root: Path, name: str, common: dict, node_args: list[str], qps: float,
            duration_ms: int, ray_head: RayHead | None) -> None:
    rows = []
    spec_kw = dict(scenario="Offline", target_qps=qps, min_duration=duration_ms,
                   output_dir=root / "runs", **common)
    result, wall, cpu = run(RunSpec(**spec_kw))
    rows.append(("in-process", result.value, wall, cpu, []))
    for count in (1, 2):
        nodes = [NodeProcess(root, common["benchmark"], *node_args) for _ in range(count)]
        try:
            for node in nodes:
                node.wait_ready()
            watch = CpuWatch(lambda nodes=nodes: [n.proc.pid for n in nodes])
            result, wall, cpu = run(RunSpec(
                **spec_kw, backend="remote",
                backend_option={"endpoints": [n.url for n in nodes]}))
            rows.append((f"remote, {count} node(s)", result.value, wall, cpu, watch.stop()))
        finally:
            for node in nodes:
                node.stop()
    if ray_head is not None:
        for count in (1, 2):
            watch = CpuWatch(lambda: ray_head.processes("ray::MlharnessReplica"))
            result, wall, cpu = run(RunSpec(
                **spec_kw, backend="ray",
                backend_option={"ray_address": ray_head.address, "replicas": count,
                                 "replica_backend": "onnxruntime"}))
            rows.append((f"ray, {count} replica(s)", result.value, wall, cpu, watch.stop()))
    print(f"\n2. scaling, Offline, {name}")
    print(f"{'':24}{'samples/s':>12}{'wall s':>8}{'LoadGen-side CPU s':>20}   node/actor CPU s")
    for label, value, wall, cpu, workers in rows:
        print(f"{label:24}{value:>12,.1f}{wall:>8.1f}{cpu:>20.1f}   "
              + (", ".join(f"{c:.1f}" for c in workers) or "-"))
    by = {label: value for label, value, *_ in rows}
    for kind, one, two in (("remote", "remote, 1 node(s)", "remote, 2 node(s)"),
                           ("ray", "ray, 1 replica(s)", "ray, 2 replica(s)")):
        if one in by and two in by:
            print(f"  {kind} 1 -> 2: x{by[two] / by[one]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-ms", type=int, default=3000)
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--skip-resnet", action="store_true")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--server-latency-ms", type=float, default=15.0,
                        help="Server p99 bound for the max-QPS search (ResNet50's is 15 ms)")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if not args.skip_overhead:
            overhead(root, args.duration_ms, args.server_latency_ms)
        if args.skip_scaling:
            return
        head = None
        if not args.skip_ray:
            head = RayHead(root, num_cpus=2)
            head.wait_ready()
        try:
            scaling(root, "demo (digits MLP, onnxruntime, 1 thread per replica)",
                    {"benchmark": "demo", "threads": 1}, ["--threads", "1"], 20000,
                    args.duration_ms, head)
            if not args.skip_resnet:
                from resnet50_graph import build_resnet50
                from synthetic_vision import make_imagenet

                make_imagenet(root / "imagenet", count=32)
                model = build_resnet50(root / "resnet50.onnx")
                common = {"benchmark": "resnet50", "model": model, "dataset": root / "imagenet",
                          "cache_dir": root / "cache", "threads": 1, "batch_size": 4}
                node_args = ["--model", str(model), "--dataset", str(root / "imagenet"),
                             "--cache-dir", str(root / "cache"), "--threads", "1"]
                scaling(root, "ResNet50-shaped (random weights, 224x224, 1 thread per replica)",
                        common, node_args, 8, args.duration_ms, head)
        finally:
            if head is not None:
                head.stop()


if __name__ == "__main__":
    main()
