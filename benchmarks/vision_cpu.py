"""ResNet50 on CPU: the official reference harness vs mlharness per runtime and precision.

Side by side in one run, Offline, the same number of samples on each side:

  reference   ``vision/classification_and_detection/python/main.py --profile
              resnet50-onnxruntime`` from the official checkout (``../shared/official``), on the
              same ResNet50 v1.5-shaped ONNX model (random weights, ``resnet50_graph.py``) and the
              same synthetic ImageNet-layout images (its defaults: batches of 32, a thread per
              core, onnxruntime's default threads)
  mlharness   onnxruntime / openvino / pytorch x fp32 / bf16 / int8 (the ones installed and
              supported by this CPU); int8 is the model ``mlharness calibrate`` builds from the
              official ImageNet calibration list (those of its files present in the synthetic
              set): the QDQ ONNX model (onnxruntime; OpenVINO reads it too) and the NNCF IR
              (``--backend openvino``)

Then reduced precision on a small TRAINED model with decisive outputs (``tests/trained_fixtures``:
a 3-conv CNN on a synthetic 10-class ImageNet-layout set): top-1 of fp32, bf16, int8 per runtime.
Ends with the machine-readable lines:

  RATIO best/reference Offline samples/s = X.XX (best: RUNTIME PRECISION ...)
  TOP1 RATIO int8/fp32 = 0.XXXX
  TOP1 RATIO bf16/fp32 = 0.XXXX

    nice -n 10 python benchmarks/vision_cpu.py --quick     # < 20 min on 2 shared cores
    python benchmarks/vision_cpu.py                         # more samples
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from mlharness.loadgen.mllog import parse_run_logs  # noqa: E402
from mlharness.rules.calibration_lists import official_list  # noqa: E402
from mlharness.spec import RunSpec  # noqa: E402
from cpu_peak import describe, peak_flops  # noqa: E402
from resnet50_graph import MACS, build_resnet50  # noqa: E402
from runtimes import (MODEL_NOTES, calibrated, installed, run_or_reason,  # noqa: E402
                      no_bf16_note, not_run, official_dir, print_machine, report_failed)
from trained_fixtures import make_set, make_trained_cnn  # noqa: E402



OFFICIAL = official_dir()
REFERENCE = OFFICIAL / "vision" / "classification_and_detection" / "python" / "main.py"
#: FLOPs of one 224x224 image through ResNet-50 v1.5 (a multiply-add is two)
RESNET50_FLOPS = 2 * MACS
#: how the pytorch backend reads the set for torchvision's weights (1000 classes)
TORCHVISION = {"label_offset": 0, "preprocessing": "torchvision"}


def runtime_configs(bf16: dict[str, bool], files: dict[str, Path]) -> list[tuple[str, str, str]]:
    """(runtime, precision, model key in build_inputs' files)."""
    out = [("onnxruntime", "fp32", "onnx"), ("onnxruntime", "int8", "int8")]
    if installed("openvino"):
        out += [("openvino", "fp32", "onnx"), ("openvino", "int8", "int8")]
        out += [("openvino", "int8", "nncf")] if installed("nncf") else []
        out += [("openvino", "bf16", "onnx")] if bf16["openvino"] else []
    if installed("torch"):
        out += [("pytorch", "fp32", "pth"), ("pytorch", "fp32", "pth-compiled")]
        out += [("pytorch", "bf16", "pth"), ("pytorch", "bf16", "pth-compiled")] \
            if bf16["pytorch"] else []
        out += [("pytorch", "int8", "pt2e")] if "pt2e" in files else []
    return out


def build_inputs(workdir: Path, images: int) -> dict[str, Path]:
    """Random ResNet50 (ONNX, its calibrated int8 copy, a torchvision-keyed state dict) and an
    ImageNet-layout set whose first half carries names from the official calibration list."""
    workdir.mkdir(parents=True, exist_ok=True)
    out = {"onnx": build_resnet50(workdir / "resnet50_v1.5_random.onnx"),
           "dataset": workdir / f"imagenet-{images}"}
    if not (out["dataset"] / "val_map.txt").is_file():
        make_set(out["dataset"], images, seed=3,
                 names=official_list("resnet50").entries()[:images // 2])
    if installed("torch"):
        import torch

        from mlharness.backends.torch_models import resnet50

        out["pth"] = workdir / "resnet50_random.pth"
        if not out["pth"].is_file():
            torch.manual_seed(0)
            torch.save(resnet50().state_dict(), out["pth"])
    out.update(calibrated("resnet50", out["onnx"], out["dataset"], workdir / "cache",
                          checkpoint=out.get("pth"), torch_task_option=TORCHVISION))
    return out


def reference(files: dict[str, Path], images: int, workdir: Path) -> float:
    """The official harness, Offline, every image once (--count); samples/s from its log."""
    out = workdir / "reference" / time.strftime("%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    (out / "user.conf").write_text("")
    cmd = [sys.executable, str(REFERENCE), "--profile", "resnet50-onnxruntime",
           "--model", str(files["onnx"]), "--dataset-path", str(files["dataset"]),
           "--scenario", "Offline", "--count", str(images), "--qps", "1", "--time", "1",
           "--output", str(out), "--cache_dir", str(workdir / "reference-cache"),
           "--user_conf", str(out / "user.conf")]
    done = subprocess.run(cmd, cwd=out, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"reference harness failed:\n{done.stderr[-2000:]}")
    return parse_run_logs(out).value


def harness(files: dict[str, Path], runtime: str, precision: str, key: str, images: int,
            workdir: Path, batch: int) -> dict[str, Any]:
    model = files[key.removesuffix("-compiled")]
    options: dict[str, Any] = {}
    if runtime == "pytorch":
        options = TORCHVISION
    compiled = {"compile": True} if key.endswith("-compiled") else {}
    spec = RunSpec(benchmark="resnet50", scenario="Offline", mode="performance", backend=runtime,
                   model=model, dataset=files["dataset"], cache_dir=workdir / "cache",
                   precision=precision, batch_size=batch, target_qps=0.001, min_duration=0,
                   min_query_count=images, performance_sample_count=images,
                   output_dir=workdir / "runs", stall_timeout=600.0, task_option=options,
                   backend_option=compiled)
    row = {"runtime": runtime, "precision": precision, "batch": batch,
           "label": f"{runtime} {precision}{MODEL_NOTES[key]}"}
    record, failure = run_or_reason(spec)
    if record is None or record.result is None:  # recorded as failed; the benchmark goes on
        return {**row, "failed": failure or "no result"}
    backend = record.data.get("backend") or {}
    return {**row, "samples_per_s": record.result.value, "run_dir": str(record.run_dir),
            "detail": backend.get("compiled") or backend.get("providers")}


def top1(model: Path, dataset: Path, runtime: str, precision: str,
         workdir: Path) -> float | None:
    """Top-1 of one accuracy run; None (the reason printed) when the run failed."""
    spec = RunSpec(benchmark="resnet50", scenario="Offline", mode="accuracy", backend=runtime,
                   model=model, dataset=dataset, cache_dir=workdir / "cache", precision=precision,
                   output_dir=workdir / "runs-accuracy")
    record, failure = run_or_reason(spec)
    if record is None or record.accuracy is None:
        report_failed(f"accuracy {runtime} {precision}", failure or "no accuracy")
        return None
    return record.accuracy.value


def accuracy_table(workdir: Path, bf16: dict[str, bool], quick: bool) -> dict[str, dict]:
    model, data = make_trained_cnn(workdir / "trained", 200 if quick else 400,
                                   80 if quick else 200)
    q = calibrated("resnet50", model, data, workdir / "cache")
    table: dict[str, dict] = {}
    for runtime in ("onnxruntime", "openvino"):
        if runtime == "openvino" and not installed("openvino"):
            continue
        int8 = q["nncf"] if runtime == "openvino" and "nncf" in q else q["int8"]
        row = {"fp32": top1(model, data, runtime, "fp32", workdir),
               "int8": top1(int8, data, runtime, "int8", workdir)}
        if runtime == "openvino" and bf16["openvino"]:
            row["bf16"] = top1(model, data, runtime, "bf16", workdir)
        table[runtime] = row
    return table


def top1_ratio(acc: dict[str, dict], precision: str) -> str | None:
    """``TOP1 RATIO precision/fp32 = X`` (the lowest over the runtimes whose runs ran; those
    that did not are named), None when no runtime has the precision."""
    having = {runtime: row for runtime, row in acc.items() if precision in row}
    if not having:
        return None
    ratios = [row[precision] / row["fp32"] for row in having.values()
              if row[precision] is not None and row["fp32"] is not None]
    failed = [{"label": f"{runtime} {p}", "failed": True} for runtime, row in having.items()
              for p in ("fp32", precision) if row[p] is None]
    value = f" = {min(ratios):.4f}" if ratios else ": none"
    return f"TOP1 RATIO {precision}/fp32{value}{not_run(failed)}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer samples (< 20 min here)")
    p.add_argument("--images", type=int, help="samples per side (default 256, --quick 128)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workdir", type=Path, default=Path("build/vision_cpu"))
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args()
    args.workdir = args.workdir.resolve()  # the reference harness runs in its own folder
    images = args.images or (128 if args.quick else 256)
    isa, bf16 = print_machine()
    print(describe(isa), flush=True)  # measured now, before anything else runs
    files = build_inputs(args.workdir, images)

    print(f"reference harness ({REFERENCE.relative_to(OFFICIAL)}), {images} samples ...",
          flush=True)
    ref_before = reference(files, images, args.workdir)
    print(f"  {ref_before:.2f} samples/s", flush=True)
    rows = []
    for runtime, precision, key in runtime_configs(bf16, files):
        r = harness(files, runtime, precision, key, images, args.workdir, args.batch_size)
        if r.get("failed"):
            report_failed(f"mlharness {r['label']}", r["failed"])
        else:
            print(f"  mlharness {r['label']:<44} {r['samples_per_s']:8.2f} samples/s",
                  flush=True)
        rows.append(r)
    ref_after = reference(files, images, args.workdir)
    ref = (ref_before + ref_after) / 2
    print(f"  reference again: {ref_after:.2f} samples/s (mean {ref:.2f})", flush=True)

    print("top-1 of a small trained CNN (fp32 vs reduced precision) ...", flush=True)
    acc = accuracy_table(args.workdir, bf16, args.quick)

    def of_peak(samples_per_s: float, precision: str) -> str:
        return f"{samples_per_s * RESNET50_FLOPS / peak_flops(isa, precision):7.1%}"

    print(f"\n{'configuration':<54} {'samples/s':>10} {'vs reference':>13} {'of peak':>8}")
    print(f"{'reference main.py (onnxruntime fp32)':<54} {ref:10.2f} {1.0:12.2f}x "
          f"{of_peak(ref, 'fp32'):>8}")
    for r in rows:
        label = f"mlharness {r['label']}"
        if r.get("failed"):
            print(f"{label:<54} {'FAILED':>10}  {r['failed']}")
            continue
        print(f"{label:<54} {r['samples_per_s']:10.2f} {r['samples_per_s'] / ref:12.2f}x "
              f"{of_peak(r['samples_per_s'], r['precision']):>8}")
    print(f"{describe(isa)}; ResNet-50 v1.5 is {RESNET50_FLOPS / 1e9:.1f} GFLOP an image")
    print(f"\n{'runtime':<12} {'fp32 top-1':>10} {'bf16 top-1':>10} {'int8 top-1':>10}")

    def cell(value: float | None) -> str:
        return "FAILED" if value is None else f"{value:.2f}"

    for runtime, row in acc.items():
        print(f"{runtime:<12} {cell(row['fp32']):>10} "
              f"{cell(row['bf16']) if 'bf16' in row else '-':>10} {cell(row['int8']):>10}")
    ran = [r for r in rows if not r.get("failed")]
    fp32_ran = [r for r in ran if r["precision"] == "fp32"]
    if fp32_ran:
        fp32_best = max(fp32_ran, key=lambda r: r["samples_per_s"])
        print(f"\nfp32 best: {fp32_best['runtime']} "
              f"{fp32_best['samples_per_s'] / ref:.2f}x reference")
    print("machine shared with other jobs: absolute numbers are low and noisy; both sides ran "
          "back to back, the reference before and after")
    if ran:
        best = max(ran, key=lambda r: r["samples_per_s"])
        print(f"RATIO best/reference Offline samples/s = {best['samples_per_s'] / ref:.2f} "
              f"(best: {best['label']} batch {best['batch']}{not_run(rows)})")
    else:
        print(f"RATIO best/reference Offline samples/s: none{not_run(rows)}")
    for precision in ("int8", "bf16"):
        line = top1_ratio(acc, precision)
        if line:
            print(line)
    if not any("bf16" in row for row in acc.values()):
        print(no_bf16_note("TOP1 RATIO bf16/fp32"))
    if args.json:
        args.json.write_text(json.dumps({"reference": [ref_before, ref_after], "harness": rows,
                                         "accuracy": acc, "isa": isa, "images": images},
                                        indent=2, default=str))


if __name__ == "__main__":
    main()
