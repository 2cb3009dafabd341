"""YOLO Offline on this CPU: the reference ``yolo_loadgen.py`` (ultralytics on the PyTorch
checkpoint, one image per call, in the YOLO referee's Python) and ``mlharness run -b yolo-99`` on
the same model and images, one after the other, in each precision mlharness offers here; prints
the machine, a table, and per precision

    RATIO mlharness/reference Offline samples/s = X  [fp32 onnxruntime, mAP 100.0% of fp32]

The model is a random-weight YOLO11 of the benchmark's size (``--size l``; ``n`` for a quick look)
built by ultralytics from its own yaml, or a trained checkpoint you have (``--checkpoint
yolo11l.pt``), exported to ONNX with dynamic axes; the images the tests' photographs (four
letterboxed shapes). Accuracy is mAP on annotations made from mlharness's fp32 detections
(``yolo_support.self_labelled``: fp32 scores 100%), so a precision's mAP is how much of fp32's
answer it keeps; yolo-99 asks 99% of the reference's mAP. On random weights that column says
little: a random network amplifies any rounding (docs/yolo.md); give ``--checkpoint``. int8 is
calibrated on the same photographs (there is no official YOLO calibration list: docs/yolo.md). The reference forces a
600 s minimum in performance mode; its Offline query is sized from ``target_qps`` instead
(user.conf), so both sides answer ``--samples`` samples. Needs ``make referee-yolo``.

    python benchmarks/yolo_cpu.py [--size l] [--samples 64] [--batch-size 8] [--threads N]
        [--variants fp32:onnxruntime,fp32:openvino,bf16:openvino,int8:openvino] [--world DIR]
        [--checkpoint yolo11l.pt]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import yolo_support as ys  # noqa: E402 - from tests/

DEFAULT_VARIANTS = "fp32:onnxruntime,fp32:openvino,bf16:openvino,int8:openvino"


def machine() -> str:
    """The CPU, its cores and the matrix instructions that bf16 and int8 use."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    model = re.search(r"model name\s*:\s*(.*)", info)
    flag_line = re.search(r"flags\s*:\s*(.*)", info)
    flags = set(flag_line.group(1).split()) if flag_line else set()
    isa = [f for f in ("avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8") if f in flags]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{model.group(1) if model else 'unknown CPU'}, {os.cpu_count()} logical CPUs, "
            f"{' '.join(isa) or 'no VNNI/bf16/AMX'}; load average {load:.1f}")


def reference_rate(world: ys.YoloWorld, work: Path, samples: int) -> float:
    work.mkdir(parents=True, exist_ok=True)
    # Offline's query holds target_qps x min_duration samples: the forced 600 s sets the size
    (work / "user.conf").write_text(f"yolo.Offline.target_qps = {samples / 600.0:.6f}\n")
    script = ys.referee.INFERENCE / ys.YOLO_DIR / "yolo_loadgen.py"
    ys.referee.yolo_python(str(script), "--model", str(world.pt), "--dataset-path",
                           str(world.images), "--annotation-file", str(world.annotations),
                           "--output", str(work / "logs"), "--PerformanceOnly", "--scenario",
                           "Offline", "--user_conf", str(work / "user.conf"), cwd=work,
                           timeout=7200)
    text = (work / "logs" / "mlperf_log_summary.txt").read_text()
    return float(re.search(r"Samples per second\s*:\s*([\d.]+)", text).group(1))


def mlharness(args: list[str]) -> dict:
    """``mlharness ARGS`` in this process (the run in its child); the run's record."""
    from mlharness.cli.main import main

    out = Path(args[args.index("--output-dir") + 1])
    before = set(out.rglob("run.json")) if out.exists() else set()
    code = main(args)
    [record] = set(out.rglob("run.json")) - before
    data = json.loads(record.read_text())
    assert code in (0, 1) and data["status"] == "ok", (code, data.get("error"))
    return data


def calibrated(world: ys.YoloWorld, data: Path, backend: str, work: Path) -> Path:
    """``mlharness calibrate`` on the photographs (an own list: no official one for YOLO)."""
    from mlharness.cli.main import main

    work.mkdir(parents=True, exist_ok=True)
    names = work / "calibration.txt"
    names.write_text("".join(i["file_name"] + "\n" for i in world.image_list()))
    suffix = ".xml" if backend == "openvino" else ".onnx"
    target = work / f"{world.onnx.stem}.int8{suffix}"
    code = main(["calibrate", "-b", "yolo-99", "--model", str(world.onnx), "--dataset",
                 str(data), "--backend", backend, "--calibration-list", str(names),
                 "--output", str(target), "--cache-dir", str(work / "cache"), "--no-progress"])
    assert code == 0, f"calibrate --backend {backend} failed"
    return target


def variant(world: ys.YoloWorld, data: Path, work: Path, precision: str, backend: str,
            samples: int, batch: int, threads: int | None) -> tuple[float, float]:
    """An Offline performance run of about ``samples`` samples and an accuracy run; returns
    (samples/s, mAP)."""
    model = (calibrated(world, data, backend, work / "int8") if precision == "int8"
             else world.onnx)
    common = ["-b", "yolo-99", "--model", str(model), "--dataset", str(data), "--backend",
              backend, "--precision", precision, "--cache-dir", str(work / "cache"),
              "--no-progress", "--output-dir", str(work / "runs"), "--scenario", "Offline",
              "--batch-size", str(batch),
              *(["--threads", str(threads)] if threads else [])]
    # one query of `samples` samples: target_qps x 1 s; shorter than 1 s is fine for a rate
    perf = mlharness(["run", *common, "--test", "--min-duration", "1000", "--target-qps",
                      str(samples)])
    acc = mlharness(["run", *common, "--mode", "accuracy"])
    return float(perf["result"]["value"]), float(acc["accuracy"]["value"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="l", help="YOLO11 size: l (the benchmark's) or n")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--variants", default=DEFAULT_VARIANTS,
                        help="precision:backend pairs, comma-separated (first: the fp32 base)")
    parser.add_argument("--world", type=Path, default=None,
                        help="a folder yolo_support.build_world(DIR, size) made earlier")
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="a trained checkpoint (e.g. the published yolo11l.pt) instead of "
                             "random weights: then the accuracy column means what it says")
    args = parser.parse_args()
    print(f"machine: {machine()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="yolo-bench-") as tmp:
        root = Path(tmp)
        world = (ys.YoloWorld(args.world, args.world / "model", args.world / "coco", args.size)
                 if args.world else ys.build_world(root / "world", args.size, args.checkpoint))
        # the photographs, annotated with mlharness's fp32 detections (mAP 100 in fp32)
        data = ys.self_labelled(world, root / "data", 640, count=len(world.image_list()))
        ref = reference_rate(world, root / "ref", args.samples)
        print(f"reference  Offline samples/s = {ref:.3f}  [ultralytics, PyTorch .pt, fp32]",
              flush=True)
        results = []
        for pair in args.variants.split(","):
            precision, backend = pair.split(":")
            rate, mean_ap = variant(world, data, root / pair.replace(":", "-"), precision,
                                    backend, args.samples, args.batch_size, args.threads)
            results.append((precision, backend, rate, mean_ap))
            print(f"mlharness  Offline samples/s = {rate:.3f}  [{precision} {backend}, "
                  f"mAP {mean_ap:.3f}%]", flush=True)
        print(f"machine after: {machine()}")
        base = results[0][3]
        for precision, backend, rate, mean_ap in results:
            print(f"RATIO mlharness/reference Offline samples/s = {rate / ref:.2f}  "
                  f"[{precision} {backend}, mAP {100 * mean_ap / base:.1f}% of fp32]")


if __name__ == "__main__":
    main()
