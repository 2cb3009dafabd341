"""3D-UNet (KiTS19) on CPU: the official reference harness vs mlharness, Offline, side by side.

Both sides run the same random-weight model of the official graph (``tests/synthetic_kits19``:
conv + instance norm + ReLU blocks, ``--filters`` per level; the official width is
32,64,128,256,320) on the same synthetic KiTS19 cases, every case the same volume (so whichever
samples LoadGen picks, each side does the same work):

  reference   ``vision/medical_imaging/3d-unet-kits19/run.py --backend onnxruntime`` (unmodified,
              in the 3D-UNet referee's Python: ``make referee-kits19``), after its own
              ``preprocess.py``: one window per onnxruntime call, fp32, the fixed-batch model.
  mlharness   onnxruntime fp32 on the fixed-batch model (one window a call) and on the
              dynamic-batch model (``--window-batch`` windows a call), the sums of one call made
              while the next runs; OpenVINO fp32 (``--no-openvino`` leaves it out).

LoadGen: Offline, ``--samples`` samples in one query, min duration 0, the same on both sides.
The reference runs before and after mlharness's rows; the faster of its two runs is the baseline
(the load of a shared machine moves; this errs against mlharness).
Prints each row's samples/s, windows/s and the fraction of the CPU's fp32 peak reached (the
model's multiply-adds per window, counted from its convolutions), then:

  RATIO mlharness/reference Offline samples/s = X.XX (onnxruntime fp32, the same runtime)

    nice -n 10 python benchmarks/unet3d_cpu.py --quick           # small model, minutes
    python benchmarks/unet3d_cpu.py --filters 32,64,128,256,320   # the official width
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from mlharness.loadgen.mllog import parse_run_logs  # noqa: E402
from mlharness.loadgen.settings import render_user_conf  # noqa: E402
from mlharness.spec import RunSpec  # noqa: E402
from mlharness.tasks.kits19.cases import INFERENCE_CASES  # noqa: E402
from cpu_peak import describe, peak_flops  # noqa: E402
from synthetic_kits19 import make_case, unet3d_onnx  # noqa: E402

KITS = "vision/medical_imaging/3d-unet-kits19"
#: raw (slices, rows, columns) at (3.2, 2.4, 2.4) mm: 128 x 192 x 192 after resampling, 4 windows
CASE = ((40, 80, 80), (3.2, 2.4, 2.4))


def official_dir() -> Path:
    """The official checkout: $MLPERF_INFERENCE_DIR, else ../shared/official/inference."""
    if os.environ.get("MLPERF_INFERENCE_DIR"):
        return Path(os.environ["MLPERF_INFERENCE_DIR"])
    for base in (ROOT.parent, ROOT.parent.parent):
        if (base / "shared" / "official" / "inference").is_dir():
            return base / "shared" / "official" / "inference"
    raise SystemExit("official checkout not found: set MLPERF_INFERENCE_DIR")


def machine() -> dict[str, Any]:
    """The CPU's matrix paths (printed), for the peak."""
    from mlharness.hostinfo import cpu_info, matrix_isa

    isa = matrix_isa()
    print(f"machine: {cpu_info()['model']}, {os.cpu_count()} cpus; flags: "
          f"{' '.join(isa['flags'])}", flush=True)
    return isa


def run_or_reason(spec: RunSpec) -> tuple[Any, str | None]:
    """``execute(spec)``'s record, or why it did not run (one line)."""
    from mlharness.errors import HarnessError, one_line
    from mlharness.runner import execute

    try:
        record = execute(spec)
    except HarnessError as exc:
        return None, one_line(exc)
    if record.status != "ok":
        return None, record.error_message or f"status {record.status}"
    return record, None


def unet_flops(filters: tuple[int, ...], roi: int = 128) -> float:
    """Floating-point operations (2 per multiply-add) of one window through the official graph
    at ``filters``: every convolution and transposed convolution, the rest neglected."""
    flops = 0.0

    def conv(c_in: int, c_out: int, size: int, k: int = 27) -> None:
        nonlocal flops
        flops += 2.0 * c_in * c_out * k * size ** 3

    size = roi
    conv(1, filters[0], size)
    conv(filters[0], filters[0], size)
    sizes = [size]
    for c_in, c_out in zip(filters[:-1], filters[1:]):
        size //= 2
        conv(c_in, c_out, size)
        conv(c_out, c_out, size)
        sizes.append(size)
    size //= 2
    conv(filters[-1], filters[-1], size)
    conv(filters[-1], filters[-1], size)
    ups = [(filters[-1], filters[-1])] + list(zip(reversed(filters[1:]), reversed(filters[:-1])))
    for (c_in, c_out), skip_size in zip(ups, reversed(sizes)):
        conv(c_in, c_out, skip_size, k=1)  # ConvTranspose k2 s2: c_in x c_out per output voxel
        conv(2 * c_out, c_out, skip_size)
        conv(c_out, c_out, skip_size)
    conv(filters[0], 3, roi, k=1)
    return flops


def build_inputs(workdir: Path, filters: tuple[int, ...]) -> dict[str, Path]:
    """43 case folders linked to one synthetic case, and the two models (cached by width)."""
    data = workdir / "kits19" / "data"
    if not (data / "case_00400").exists():
        shutil.rmtree(data, ignore_errors=True)
        shape, spacing = CASE
        make_case(data / "case_00000", shape, spacing, seed=7)
        for case in INFERENCE_CASES[1:]:
            (data / case).mkdir(parents=True)
            for name in ("imaging.nii.gz", "segmentation.nii.gz"):
                os.symlink(data / "case_00000" / name, data / case / name)
    width = "-".join(map(str, filters))
    models = workdir / "models" / width
    fixed, dynamic = models / "unet3d.onnx", models / "unet3d_dynbatch.onnx"
    if not fixed.is_file():
        unet3d_onnx(fixed, filters=filters)
    if not dynamic.is_file():
        unet3d_onnx(dynamic, filters=filters, batch=None)
    return {"data": data, "fixed": fixed, "dynamic": dynamic}


def spec_for(files: dict[str, Path], n: int, workdir: Path, **kw: Any) -> RunSpec:
    return RunSpec(benchmark="3d-unet-99", scenario="Offline", mode="performance",
                   dataset=files["data"], cache_dir=workdir / "cache", max_samples=n,
                   target_qps=0.001, min_duration=0, min_query_count=n,
                   performance_sample_count=n, output_dir=workdir / "runs",
                   stall_timeout=7200.0, **kw)


def reference(files: dict[str, Path], n: int, workdir: Path, python: str) -> float:
    """``preprocess.py`` once, then ``run.py --backend onnxruntime`` Offline on n samples with
    the same LoadGen settings as ours; its samples/s."""
    work = workdir / "reference"
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "meta").exists():
        (work / "meta").symlink_to(official_dir() / KITS / "meta")
    pre = work / "preprocessed"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if not (pre / "preprocessed_files.pkl").is_file():
        # ends by comparing the pickles' MD5 with the real data's: synthetic cases fail there,
        # after everything is written
        subprocess.run([python, str(official_dir() / KITS / "preprocess.py"), "--raw_data_dir",
                        str(files["data"]), "--results_dir", str(pre), "--num_proc", "2"],
                       cwd=work, env=env, capture_output=True, text=True)
        if not (pre / "preprocessed_files.pkl").is_file():
            raise SystemExit("the reference's preprocess.py failed")
    out = work / time.strftime("logs-%H%M%S")
    out.mkdir()
    spec = spec_for(files, n, workdir, model=files["fixed"])
    (out / "user.conf").write_text(render_user_conf(spec.test_config("3d-unet")))
    cmd = [python, str(official_dir() / KITS / "run.py"), "--backend", "onnxruntime",
           "--scenario", "Offline", "--model", str(files["fixed"]), "--preprocessed_data_dir",
           str(pre), "--performance_count", str(n), "--mlperf_conf",
           str(official_dir() / "loadgen" / "mlperf.conf"), "--user_conf", str(out / "user.conf")]
    done = subprocess.run(cmd, cwd=work, env={**env, "LOG_PATH": str(out), "USE_GPU": "no"},
                          capture_output=True, text=True)
    if done.returncode != 0 or not (out / "mlperf_log_detail.txt").is_file():
        raise SystemExit(f"reference harness failed:\n{done.stderr[-3000:]}")
    return parse_run_logs(out).value


def harness(files: dict[str, Path], n: int, workdir: Path, label: str, model: str,
            backend: str = "onnxruntime", window_batch: int | None = None) -> dict[str, Any]:
    options = {"window_batch": str(window_batch)} if window_batch else {}
    spec = spec_for(files, n, workdir, model=files[model], backend=backend, task_option=options)
    record, failure = run_or_reason(spec)
    if record is None or record.result is None:
        return {"label": label, "failed": failure or "no result"}
    return {"label": label, "samples_per_s": record.result.value, "backend": backend,
            "warmup_s": (record.data.get("sut") or {}).get("warmup_s")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a narrow model (8,16,32,64), 4 samples")
    p.add_argument("--filters", help="channels per level (official: 32,64,128,256,320)")
    p.add_argument("--samples", type=int, help="samples (cases of 4 windows) per side")
    p.add_argument("--window-batch", type=int, default=2, help="windows a call, dynamic model")
    p.add_argument("--reference-python", help="the 3D-UNet referee's Python "
                                              "(default .venv-referee-kits19/bin/python)")
    p.add_argument("--no-reference", dest="reference", action="store_false")
    p.add_argument("--no-openvino", dest="openvino", action="store_false")
    p.add_argument("--workdir", type=Path, default=Path("build/unet3d_cpu"))
    args = p.parse_args()
    args.workdir = args.workdir.resolve()
    filters = tuple(int(f) for f in (args.filters or ("8,16,32,64" if args.quick
                                                      else "32,64,128,256,320")).split(","))
    n = args.samples or (4 if args.quick else 2)
    isa = machine()
    print(describe(isa), flush=True)
    files = build_inputs(args.workdir, filters)
    work = unet_flops(filters)
    windows = 4  # CASE: 128 x 192 x 192
    print(f"model filters {','.join(map(str, filters))}: {work / 1e9:.1f} GFLOP a window; "
          f"{n} samples of {windows} windows each side", flush=True)
    from mlharness.tasks import TaskOptions, create_task

    create_task("3d-unet-99", TaskOptions(dataset=files["data"], cache_dir=args.workdir / "cache",
                                          max_samples=1)).prepare()
    ref = None
    if args.reference:
        python = args.reference_python or str(ROOT / ".venv-referee-kits19" / "bin" / "python")
        print("reference harness (3d-unet-kits19/run.py --backend onnxruntime) ...", flush=True)
        ref = reference(files, n, args.workdir, python)
        print(f"  {ref:.4f} samples/s", flush=True)
    rows = [harness(files, n, args.workdir, "onnxruntime fp32, 1 window a call", "fixed"),
            harness(files, n, args.workdir, f"onnxruntime fp32, {args.window_batch} windows a "
                    "call", "dynamic", window_batch=args.window_batch)]
    if args.openvino:
        rows.append(harness(files, n, args.workdir, "openvino fp32, 1 window a call", "fixed",
                            backend="openvino"))
    if ref:  # again after ours: the faster of the two (a shared machine's load moves)
        print("reference harness again ...", flush=True)
        again = reference(files, n, args.workdir, python)
        print(f"  {again:.4f} samples/s (first {ref:.4f}; the faster is the baseline)",
              flush=True)
        ref = max(ref, again)
    for r in rows:
        if r.get("failed"):
            print(f"  mlharness {r['label']}: FAILED: {r['failed']}", flush=True)
    peak = peak_flops(isa, "fp32")
    print(f"\n{'configuration':<48} {'samples/s':>10} {'windows/s':>10} {'vs reference':>13} "
          f"{'of peak':>8}")
    if ref:
        print(f"{'reference run.py (onnxruntime fp32)':<48} {ref:10.4f} {ref * windows:10.3f} "
              f"{1.0:12.2f}x {ref * windows * work / peak:8.1%}")
    for r in rows:
        if r.get("failed"):
            print(f"{'mlharness ' + r['label']:<48} {'FAILED':>10}  {r['failed']}")
            continue
        s = r["samples_per_s"]
        ratio = f"{s / ref:12.2f}x" if ref else f"{'-':>13}"
        print(f"{'mlharness ' + r['label']:<48} {s:10.4f} {s * windows:10.3f} {ratio} "
              f"{s * windows * work / peak:8.1%}")
    print(f"\n{describe(isa)}; the machine may be shared with other jobs, so absolute numbers "
          "are noisy; ratios come from one run")
    same = [r for r in rows if not r.get("failed") and r["backend"] == "onnxruntime"]
    if ref and same:
        best = max(same, key=lambda r: r["samples_per_s"])
        print(f"RATIO mlharness/reference Offline samples/s = {best['samples_per_s'] / ref:.2f} "
              f"(onnxruntime fp32, the same runtime: {best['label']}; filters "
              f"{','.join(map(str, filters))})")


if __name__ == "__main__":
    main()
