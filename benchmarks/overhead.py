"""Harness overhead: mlharness (no-op backend) vs a bare LoadGen SUT that completes inline.

Both sides run the same LoadGen settings, each test in its own spawned process, side by side
in one invocation. Prints Offline samples/s and their ratio, and SingleStream mean latency and
the difference. Goal (issue 2): ratio >= 0.9 and added SingleStream latency <= 50 us.

    .venv/bin/python benchmarks/overhead.py [--duration-ms 5000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from mlharness.loadgen.mllog import parse_run_logs  # noqa: E402
from mlharness.loadgen.settings import TestConfig, render_user_conf  # noqa: E402
from mlharness.runner import execute  # noqa: E402
from mlharness.spec import RunSpec  # noqa: E402

SETTINGS = {
    "Offline": {"target_qps": 2_000_000.0},
    "SingleStream": {"target_latency_ms": 0.005},
}


def bare_child(scenario: str, outdir: str, user_conf: str) -> None:
    """A bare LoadGen SUT: answers each query inline with one float32, no queue, no batching."""
    import array
    import os

    import mlperf_loadgen as lg

    os.chdir(outdir)
    payload = array.array("B", b"\x00" * 4)
    ptr, size = payload.buffer_info()

    def issue(samples: list) -> None:
        lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, ptr, size) for s in samples])

    settings = lg.TestSettings()
    settings.FromConfig(user_conf, "null", scenario)
    settings.scenario = getattr(lg.TestScenario, scenario)
    settings.mode = lg.TestMode.PerformanceOnly
    log = lg.LogSettings()
    log.log_output.outdir = outdir
    log.enable_trace = False
    sut = lg.ConstructSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(1024, 1024, lambda i: None, lambda i: None)
    lg.StartTestWithLogSettings(sut, qsl, settings, log, "audit.config")
    lg.DestroyQSL(qsl)
    lg.DestroySUT(sut)


def run_bare(scenario: str, duration_ms: int, root: Path) -> dict:
    outdir = Path(tempfile.mkdtemp(dir=root, prefix=f"bare-{scenario}-"))
    cfg = TestConfig("null", scenario, min_duration_ms=duration_ms, **SETTINGS[scenario])
    (outdir / "user.conf").write_text(render_user_conf(cfg))
    proc = mp.get_context("spawn").Process(target=bare_child,
                                           args=(scenario, str(outdir), str(outdir / "user.conf")))
    proc.start()
    proc.join()
    return _numbers(parse_run_logs(outdir))


def run_harness(scenario: str, duration_ms: int, root: Path, batch: int | None) -> dict:
    spec = RunSpec(benchmark="null_task:create", backend="noop", scenario=scenario,
                   min_duration=duration_ms, output_dir=root, batch_size=batch,
                   # RunSpec names the same settings without the unit suffix
                   **{k.removesuffix("_ms"): v for k, v in SETTINGS[scenario].items()})
    record = execute(spec)
    assert record.result is not None, record.data.get("error")
    return _numbers(record.result)


def _numbers(result) -> dict:
    return {"qps": result.value if result.scenario == "Offline" else None,
            "mean_ms": result.latencies_ms.get("mean"), "valid": result.valid}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-ms", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=2, help="alternating pairs per scenario")
    parser.add_argument("--batch-size", type=int, default=None, help="harness Offline batch")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        off_bare, off_h, ss_bare, ss_h = [], [], [], []
        for _ in range(args.repeat):
            off_bare.append(run_bare("Offline", args.duration_ms, root)["qps"])
            off_h.append(run_harness("Offline", args.duration_ms, root, args.batch_size)["qps"])
            ss_bare.append(run_bare("SingleStream", args.duration_ms, root)["mean_ms"])
            ss_h.append(run_harness("SingleStream", args.duration_ms, root, None)["mean_ms"])
    ob, oh = statistics.median(off_bare), statistics.median(off_h)
    sb, sh = statistics.median(ss_bare), statistics.median(ss_h)
    print(f"{'':24}{'bare LoadGen':>16}{'mlharness':>16}")
    print(f"{'Offline samples/s':24}{ob:>16,.0f}{oh:>16,.0f}   ratio {oh / ob:.3f} (goal >= 0.9)")
    print(f"{'SingleStream mean (us)':24}{sb * 1000:>16.1f}{sh * 1000:>16.1f}   "
          f"added {(sh - sb) * 1000:+.1f} us (goal <= 50 us)")
    print(f"(median of {args.repeat} alternating runs of {args.duration_ms} ms each)")


if __name__ == "__main__":
    main()
