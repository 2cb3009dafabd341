"""What the CPU benchmarks share: the official checkout, which runtimes and bf16 paths this
machine has, and the calibrated int8 models (``mlharness calibrate``) of a model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mlharness.backends import quantiser_of
from mlharness.calibration import CalibrationRequest, calibrate
from mlharness.hostinfo import ONEDNN_ISA_VARIABLES, cpu_info, matrix_isa

ROOT = Path(__file__).resolve().parents[1]

#: how each model file was made, for the tables (keys as the benchmarks name their files)
MODEL_NOTES = {"onnx": "", "int8": " (QDQ)", "nncf": " (NNCF IR)", "pth": "", "pytorch": "",
               "pth-compiled": " (torch.compile)", "pt2e": " (calibrated PT2E, compiled)"}


def official_dir() -> Path:
    """The official checkout: $MLPERF_INFERENCE_DIR, else ../shared/official/inference beside
    the repository (or beside the folder of worktrees)."""
    if os.environ.get("MLPERF_INFERENCE_DIR"):
        return Path(os.environ["MLPERF_INFERENCE_DIR"])
    for base in (ROOT.parent, ROOT.parent.parent):
        if (base / "shared" / "official" / "inference").is_dir():
            return base / "shared" / "official" / "inference"
    raise SystemExit("official checkout not found: set MLPERF_INFERENCE_DIR")


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (found, not imported: torchao logs at import)."""
    import importlib.util

    return importlib.util.find_spec(module) is not None


def bf16_paths() -> dict[str, bool]:
    ov = torch = False
    if installed("openvino"):
        import openvino

        caps = openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        ov = "BF16" in [str(c) for c in caps]
    if installed("torch"):
        from mlharness.backends.pytorch import bf16_supported

        torch = bf16_supported()
    return {"openvino": ov, "pytorch": torch}


def no_bf16_note(ratio_line: str) -> str:
    """Why a benchmark's bf16 rows and its ``ratio_line`` are missing on this CPU."""
    return (f"no bf16 path on this CPU (neither AVX512_BF16 nor AMX): bf16 is refused, so no "
            f"bf16 rows and no {ratio_line} line")


def print_machine() -> tuple[dict[str, Any], dict[str, bool]]:
    """Print the CPU's matrix paths and which runtimes use bf16; return both."""
    isa = matrix_isa()
    print(f"machine: {cpu_info()['model']}, {os.cpu_count()} cpus; matrix paths: "
          f"bf16={isa['bf16'] or 'none'}, int8={isa['int8'] or 'none'} "
          f"(flags: {' '.join(isa['flags'])})", flush=True)
    if isa.get("onednn_max_cpu_isa"):
        where = " or ".join(ONEDNN_ISA_VARIABLES)
        print(f"  oneDNN's ISA capped at {isa['onednn_max_cpu_isa']} ({where}): OpenVINO and "
              "PyTorch obey it, onnxruntime does not", flush=True)
    bf16 = bf16_paths()
    print(f"bf16 used by: {', '.join(k for k, v in bf16.items() if v) or 'none'}", flush=True)
    return isa, bf16


def calibrated(benchmark: str, model: Path, dataset: Path, cache: Path,
               vocab: Path | None = None, checkpoint: Path | None = None,
               torch_task_option: dict[str, Any] | None = None) -> dict[str, Path]:
    """The official-list int8 models of ``model``, each built once: ``int8`` (the QDQ model for
    onnxruntime), with NNCF installed ``nncf`` (the IR for openvino), and with torchao installed
    ``pt2e`` (the PT2E program of the PyTorch ``checkpoint``, read with ``torch_task_option``)."""
    wanted = [("int8", "onnxruntime", model, None)]
    if installed("nncf"):
        wanted.append(("nncf", "openvino", model, None))
    if checkpoint is not None and installed("torchao"):
        wanted.append(("pt2e", "pytorch", checkpoint, torch_task_option))
    out = {}
    for key, runtime, source, task_option in wanted:
        quantising = quantiser_of(runtime)
        assert quantising is not None, runtime
        out[key] = quantising.default_output(source)
        if not out[key].is_file():
            calibrate(CalibrationRequest(benchmark, source, dataset, backend=runtime, vocab=vocab,
                                         cache_dir=cache, task_option=task_option))
    return out


def run_or_reason(spec: Any) -> tuple[Any, str | None]:
    """``execute(spec)``'s record and None, or None and why the row failed (one line): a row
    that crashes or is refused is recorded as failed and the benchmark goes on."""
    from mlharness.errors import HarnessError, one_line
    from mlharness.runner import execute

    try:
        record = execute(spec)
    except HarnessError as exc:  # refused before it ran (e.g. a setting this CPU lacks)
        return None, one_line(exc)
    if record.status != "ok":
        return None, one_line(Exception((record.data.get("error") or {}).get("message")
                                        or f"status {record.status}"))
    return record, None


def report_failed(label: str, reason: str) -> None:
    print(f"  {label:<54} FAILED: {reason}", flush=True)


def not_run(rows: list[dict[str, Any]], key: str = "failed") -> str:
    """``; did not run: A, B`` for a RATIO line (empty when every row ran)."""
    failed = [r["label"] for r in rows if r.get(key)]
    return f"; did not run: {', '.join(failed)}" if failed else ""
