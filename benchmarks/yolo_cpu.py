"""YOLO Offline on this CPU: the reference ``yolo_loadgen.py`` (ultralytics on the PyTorch checkpoint, one image per call,
in the YOLO referee's Python) and ``mlharness run -b yolo-99`` (onnxruntime, batched by shape) on
the same model and images, one after the other; prints

    RATIO mlharness/reference Offline samples/s = X

The model is the tests' random-weight YOLO11 (``--size n``; ``l`` is the benchmark's
architecture, slower to build and run) from ultralytics' own yaml, exported to ONNX with
dynamic axes; the images the tests' photographs. The reference forces a 600 s minimum in
performance mode; its Offline query is sized from ``target_qps`` instead (user.conf), so both
sides process about ``--samples`` samples. Needs ``make referee-yolo``.

    python benchmarks/yolo_cpu.py [--samples 64] [--batch-size 8] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import yolo_support as ys  # noqa: E402 - from tests/


def reference_rate(world: ys.YoloWorld, work: Path, samples: int) -> float:
    work.mkdir(parents=True, exist_ok=True)
    # Offline's query holds target_qps x min_duration samples: the forced 600 s sets the size
    (work / "user.conf").write_text(f"yolo.Offline.target_qps = {samples / 600.0:.6f}\n")
    script = ys.referee.INFERENCE / ys.YOLO_DIR / "yolo_loadgen.py"
    ys.referee.yolo_python(str(script), "--model", str(world.pt), "--dataset-path",
                           str(world.images), "--annotation-file", str(world.annotations),
                           "--output", str(work / "logs"), "--PerformanceOnly", "--scenario",
                           "Offline", "--user_conf", str(work / "user.conf"), cwd=work,
                           timeout=3600)
    text = (work / "logs" / "mlperf_log_summary.txt").read_text()
    return float(re.search(r"Samples per second\s*:\s*([\d.]+)", text).group(1))


def mlharness_rate(world: ys.YoloWorld, work: Path, samples: int, batch: int,
                   threads: int | None) -> float:
    from mlharness.cli.main import main

    flags = ["--threads", str(threads)] if threads else []
    code = main(["run", "-b", "yolo-99", "--model", str(world.onnx), "--dataset",
                 str(world.coco), "--cache-dir", str(work / "cache"), "--no-progress",
                 "--output-dir", str(work / "runs"), "--scenario", "Offline", "--test",
                 "--min-duration", "0", "--target-qps", str(samples / 2.0),
                 "--batch-size", str(batch), *flags])
    [run_dir] = list((work / "runs" / "yolo-99").iterdir())
    record = json.loads((run_dir / "run.json").read_text())
    assert code in (0, 1), record
    return float(record["result"]["value"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="yolo-bench-") as tmp:
        root = Path(tmp)
        world = ys.build_world(root)
        ref = reference_rate(world, root / "ref", args.samples)
        ours = mlharness_rate(world, root / "ours", args.samples, args.batch_size, args.threads)
        print(f"reference  Offline samples/s = {ref:.3f}")
        print(f"mlharness  Offline samples/s = {ours:.3f}")
        print(f"RATIO mlharness/reference Offline samples/s = {ours / ref:.2f}")


if __name__ == "__main__":
    main()
