"""ResNet50 on CPU through the harness: the reference's default path vs batching and threading.

Builds (once, in --workdir) a ResNet50 v1.5-shaped ONNX model with random weights
(``resnet50_graph.py``) and a synthetic ImageNet-layout set whose pre-processed samples go to the
harness's on-disk cache, then runs Offline performance tests through ``mlharness.runner.execute``:

  reference   batch 1, one worker, onnxruntime's default threads, fp32 (the reference's default
              path: ``python/main.py`` with its onnxruntime backend)
  candidates  --batch-sizes x {1 worker x default threads, --workers workers x 1 thread}
  int8        the best candidate's batching on a statically quantised copy of the model
              (onnxruntime QDQ, per-channel int8 weights, uint8 activations, calibrated on the
              synthetic samples), and on ``--precision int8`` (the backend's dynamic
              quantisation of MatMul/Gemm only)

The best fp32 candidate and the reference then run again back to back (--repeats times) and the
means are compared, so both see the same machine load. Prints samples/s and the ratios.

    python benchmarks/vision_cpu.py                  # ~5 minutes on 2 cores
    python benchmarks/vision_cpu.py --duration-ms 5000 --batch-sizes 8 --no-int8   # quicker
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from mlharness.runner import execute  # noqa: E402
from mlharness.spec import RunSpec  # noqa: E402
from mlharness.tasks import TaskOptions, create_task  # noqa: E402
from resnet50_graph import build_resnet50  # noqa: E402


def build_inputs(workdir: Path, images: int) -> tuple[Path, Path]:
    """The model and a dataset whose pre-processed samples are already cached."""
    from synthetic_vision import make_imagenet

    model = build_resnet50(workdir / "resnet50_v1.5_random.onnx")
    dataset = workdir / "imagenet"
    if not (dataset / "val_map.txt").is_file():
        make_imagenet(dataset, count=images, seed=3)
    task = create_task("resnet50", TaskOptions(dataset=dataset, cache_dir=workdir / "cache"))
    task.prepare()
    return model, dataset


def quantise_static(model: Path, dataset: Path, workdir: Path, samples: int = 16) -> Path:
    """A QDQ int8 copy of ``model`` calibrated on the cached synthetic samples."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    target = workdir / "resnet50_v1.5_random.int8-qdq.onnx"
    if target.is_file():
        return target
    task = create_task("resnet50", TaskOptions(dataset=dataset, cache_dir=workdir / "cache"))
    indices = list(range(min(samples, task.total_count())))
    task.load_samples(indices)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter([task.batch_inputs([i]) for i in indices])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.items, None)

    logging.getLogger().setLevel(logging.ERROR)  # its "consider pre-processing" advice
    quantize_static(str(model), str(target), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    return target


def run(name: str, model: Path, dataset: Path, workdir: Path, args: argparse.Namespace,
        batch: int, workers: int, threads: int | None, precision: str = "fp32",
        target_qps: float = 5.0) -> dict[str, Any]:
    spec = RunSpec(benchmark="resnet50", scenario="Offline", mode="performance", model=model,
                   dataset=dataset, cache_dir=workdir / "cache", short=True,
                   target_qps=target_qps, min_duration_ms=args.duration_ms, batch_size=batch,
                   workers=workers, threads=threads, precision=precision,
                   output_dir=workdir / "runs")
    started = time.perf_counter()
    record = execute(spec)
    if record.status != "ok" or record.result is None:
        raise SystemExit(f"{name} failed: {record.data.get('error')}")
    out = {"name": name, "batch": batch, "workers": workers, "threads": threads or "default",
           "precision": precision, "samples_per_s": record.result.value,
           "valid": record.result.valid, "wall_s": round(time.perf_counter() - started, 1),
           "run_dir": str(record.run_dir)}
    print(f"  {name:<26} batch {batch:>3}  workers {workers}  threads {out['threads']!s:>7}  "
          f"{out['samples_per_s']:8.2f} samples/s  {'VALID' if out['valid'] else 'INVALID'}",
          flush=True)
    return out


def measured(name: str, model: Path, dataset: Path, workdir: Path, args: argparse.Namespace,
             batch: int, workers: int, threads: int | None, precision: str = "fp32",
             guess: float = 5.0) -> dict[str, Any]:
    """One run; re-run once with a matching target when the first ended too early (INVALID)."""
    out = run(name, model, dataset, workdir, args, batch, workers, threads, precision, guess)
    if not out["valid"]:
        out = run(name, model, dataset, workdir, args, batch, workers, threads, precision,
                  out["samples_per_s"] * 1.25)
    return out


def logged_classes(model: Path, dataset: Path, workdir: Path, cfg: tuple, precision: str
                   ) -> dict[int, float]:
    """An accuracy-mode run; the class each sample got, from mlperf_log_accuracy.json."""
    spec = RunSpec(benchmark="resnet50", scenario="Offline", mode="accuracy", model=model,
                   dataset=dataset, cache_dir=workdir / "cache", batch_size=cfg[0],
                   workers=cfg[1], threads=cfg[2], precision=precision,
                   output_dir=workdir / "runs")
    record = execute(spec)
    if record.status != "ok":
        raise SystemExit(f"accuracy run failed: {record.data.get('error')}")
    entries = json.loads((record.run_dir / "mlperf_log_accuracy.json").read_text())
    return {e["qsl_idx"]: float(np.frombuffer(bytes.fromhex(e["data"]), np.float32)[0])
            for e in entries}


def agreement(a: dict[int, float], b: dict[int, float]) -> float:
    """Share of samples (in %) with the same logged class."""
    return 100.0 * sum(a[i] == b.get(i) for i in a) / len(a)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workdir", type=Path, default=Path("/tmp/mlharness-vision-cpu"))
    p.add_argument("--images", type=int, default=64, help="synthetic images (QSL size)")
    p.add_argument("--duration-ms", type=int, default=15000, help="min duration of each run")
    p.add_argument("--batch-sizes", default="8,32")
    p.add_argument("--workers", type=int, default=2, help="workers for the multi-worker candidates")
    p.add_argument("--repeats", type=int, default=2, help="back-to-back reference/best pairs")
    p.add_argument("--no-int8", dest="int8", action="store_false")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args()

    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"building inputs in {args.workdir} ...", flush=True)
    model, dataset = build_inputs(args.workdir, args.images)

    print("sweep (Offline, fp32):", flush=True)
    ref = measured("reference", model, dataset, args.workdir, args, 1, 1, None)
    guess = ref["samples_per_s"] * 1.5
    candidates = []
    for bs in (int(b) for b in args.batch_sizes.split(",")):
        for workers, threads in ((1, None), (args.workers, 1)):
            candidates.append(measured(f"batched-b{bs}-w{workers}", model, dataset, args.workdir,
                                       args, bs, workers, threads, guess=guess))
    best = max(candidates, key=lambda r: r["samples_per_s"])
    threads = None if best["threads"] == "default" else best["threads"]
    cfg = (best["batch"], best["workers"], threads)

    print(f"side by side ({args.repeats}x reference then best):", flush=True)
    pairs = []
    for _ in range(args.repeats):
        a = run("reference", model, dataset, args.workdir, args, 1, 1, None,
                target_qps=ref["samples_per_s"] * 1.25)
        b = run(f"best ({best['name']})", model, dataset, args.workdir, args, *cfg,
                target_qps=best["samples_per_s"] * 1.25)
        pairs.append((a["samples_per_s"], b["samples_per_s"]))
    ref_qps = statistics.mean(a for a, _ in pairs)
    best_qps = statistics.mean(b for _, b in pairs)

    int8: list[dict[str, Any]] = []
    if args.int8:
        print("reduced precision (best batching):", flush=True)
        qdq = quantise_static(model, dataset, args.workdir)
        int8.append(measured("int8 static QDQ model", qdq, dataset, args.workdir, args, *cfg,
                             guess=best_qps * 2))
        int8.append(measured("--precision int8 (dynamic)", model, dataset, args.workdir, args,
                             *cfg, precision="int8", guess=best_qps))
        print("top-1 agreement with fp32 (accuracy-mode runs, every sample):", flush=True)
        fp32 = logged_classes(model, dataset, args.workdir, cfg, "fp32")
        int8[0]["agreement_pct"] = agreement(fp32, logged_classes(qdq, dataset, args.workdir,
                                                                  cfg, "fp32"))
        int8[1]["agreement_pct"] = agreement(fp32, logged_classes(model, dataset, args.workdir,
                                                                  cfg, "int8"))
        for r in int8:
            print(f"  {r['name']:<26} {r['agreement_pct']:.1f}% of samples same class", flush=True)

    print()
    print(f"{'configuration':<46} {'samples/s':>10} {'vs reference':>13}")
    print(f"{'reference: batch 1, fp32':<46} {ref_qps:10.2f} {1.0:12.2f}x")
    label = f"best fp32: batch {cfg[0]}, {cfg[1]} worker(s), threads {best['threads']}"
    print(f"{label:<46} {best_qps:10.2f} {best_qps / ref_qps:12.2f}x")
    for r in int8:
        print(f"{r['name']:<46} {r['samples_per_s']:10.2f} {r['samples_per_s'] / ref_qps:12.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"reference": ref_qps, "best": best_qps,
                                         "best_config": best,
                                         "sweep": [ref, *candidates], "pairs": pairs,
                                         "int8": int8}, indent=2))


if __name__ == "__main__":
    main()
