"""Reduced-precision ONNX models for the onnxruntime backend, built on request and cached.

``int8``: dynamic quantisation (``onnxruntime.quantization.quantize_dynamic``: int8 weights,
activations quantised per batch at run time) of MatMul/Gemm/Attention nodes. The result is cached
on disk under a key made of the model's sha256, the precision, the recipe and the onnxruntime
version, so a 1.3 GB model is quantised once. Embedding lookups (Gather) stay fp32.

``bf16``: the onnxruntime CPU execution provider has no bf16 kernels for the ops these models use,
so it is refused with a hint rather than emulated.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from mlharness.errors import ConfigError, ModelError

#: bump when the quantisation recipe changes
RECIPE = "dynamic-int8-v1"


def cache_root(explicit: str | Path | None = None) -> Path:
    """``explicit``, else ``$MLHARNESS_CACHE``, else ``$XDG_CACHE_HOME/mlharness``."""
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("MLHARNESS_CACHE")
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mlharness"


def model_digest(model: Path) -> str:
    h = hashlib.sha256()
    with model.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def prepared_model(model: Path, precision: str, cache_dir: str | Path | None = None) -> Path:
    """The model file to load for ``precision`` (the input itself for fp32)."""
    if precision == "fp32":
        return model
    if precision == "bf16":
        raise ConfigError(
            "the onnxruntime CPU provider has no bf16 kernels for this model's ops",
            hint="use --precision int8 (dynamic quantisation) or fp32 with onnxruntime on CPU")
    if precision != "int8":
        raise ConfigError(f"unknown precision {precision!r}", hint="use fp32, int8 or bf16")
    import onnxruntime as ort

    key = hashlib.sha256(
        f"{model_digest(model)}|{precision}|{RECIPE}|{ort.__version__}".encode()).hexdigest()[:24]
    target = cache_root(cache_dir) / "onnx" / f"{model.stem}-{precision}-{key}.onnx"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    _quantize_int8(model, target)
    return target


def _quantize_int8(model: Path, target: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".onnx.tmp")
    os.close(fd)
    try:
        quantize_dynamic(str(model), tmp, weight_type=QuantType.QInt8,
                         op_types_to_quantize=["MatMul", "Gemm", "Attention"],
                         extra_options={"MatMulConstBOnly": True})
        os.replace(tmp, target)
    except Exception as exc:  # quantize_dynamic raises assorted types
        raise ModelError(f"int8 quantisation of {model} failed: {exc}".splitlines()[0],
                         hint="run with --precision fp32, or pass a model quantised offline") from exc
    finally:
        Path(tmp).unlink(missing_ok=True)
