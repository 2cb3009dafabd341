"""Reduced-precision ONNX models for the onnxruntime backend, built on request and cached.

``int8``: dynamic quantisation (``onnxruntime.quantization.quantize_dynamic``: int8 weights,
per output channel, activations quantised per batch at run time) of the MatMul/Gemm/Attention
nodes that multiply by a constant weight. Activation x activation MatMuls (attention QK^T and
probs x V) stay fp32 (``MatMulConstBOnly``), and so do weight MatMuls/Gemms with fewer than
``MIN_QUANTISED_OUTPUTS`` output columns (the QA head, 1024 x 2): they cost nothing to run in
fp32 and sit right on the logits. The result is cached on disk under a key made of the model's
sha256, the precision, the recipe and the onnxruntime version, so a 1.3 GB model is quantised
once. Embedding lookups (Gather) stay fp32.

``bf16``: the onnxruntime CPU execution provider has no bf16 kernels for the ops these models use,
so it is refused with a hint rather than emulated.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from mlharness.backends.quantised import (MIN_QUANTISED_OUTPUTS, CalibrationTask,
                                         calibration_file, calibration_path, quantised_file,
                                         refuse_mislabelled)
from mlharness.errors import ConfigError, ModelError
from mlharness.files import cache_root, sha256_file

#: bump when the quantisation recipe changes
RECIPE = "dynamic-int8-v2-perchannel-fp32head"

#: ops that only a quantised ONNX model holds (QDQ format or integer operator format)
QUANT_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
                       "QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger"})


def is_quantized(model: Path) -> bool:
    """True for a calibrated model (record beside it) or one whose graph holds quantisation."""
    if calibration_file(Path(model)).is_file():
        return True
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    return any(n.op_type in QUANT_OPS for n in graph.node)


def prepared_model(model: Path, precision: str, cache_dir: str | Path | None = None) -> Path:
    """The model file to load for ``precision`` (the input itself for fp32 and for a model
    that is already quantised)."""
    refuse_mislabelled(model, precision)
    if precision == "fp32":
        return model
    if precision == "bf16":
        raise ConfigError(
            "the onnxruntime CPU provider has no bf16 kernels for this model's ops",
            hint="use --precision int8 (dynamic quantisation) or fp32 with onnxruntime on CPU")
    if precision != "int8":
        raise ConfigError(f"unknown precision {precision!r}", hint="use fp32, int8 or bf16")
    if is_quantized(model):
        return model
    import onnxruntime as ort

    key = hashlib.sha256(
        f"{sha256_file(model)}|{precision}|{RECIPE}|{ort.__version__}".encode()).hexdigest()[:24]
    target = cache_root(cache_dir) / "onnx" / f"{model.stem}-{precision}-{key}.onnx"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    _quantize_int8(model, target)
    return target


def _quantize_int8(model: Path, target: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with quantised_file(model, target, "int8 quantisation",
                         "run with --precision fp32, or pass a model quantised offline") as tmp:
        quantize_dynamic(str(model), tmp, weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul", "Gemm", "Attention"],
                         nodes_to_exclude=small_output_nodes(model),
                         extra_options={"MatMulConstBOnly": True})


def onnx_ops(model: Path) -> list[tuple[str, str]]:
    """``(name, op type)`` of every named node of the ONNX graph (not its subgraphs)."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    return [(node.name, node.op_type) for node in graph.node if node.name]


def small_output_nodes(model: Path, limit: int = MIN_QUANTISED_OUTPUTS) -> list[str]:
    """Names of MatMul/Gemm nodes whose weight is an initializer with fewer than ``limit`` output
    columns (the QA head); tensors stored outside the file are read from their shape only."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    dims = {t.name: list(t.dims) for t in graph.initializer}
    small = []
    for node in graph.node:
        if node.op_type not in ("MatMul", "Gemm") or len(node.input) < 2:
            continue
        shape = dims.get(node.input[1])
        if not shape or len(shape) < 2:
            continue
        trans_b = any(a.name == "transB" and a.i for a in node.attribute)
        out_cols = shape[-2] if trans_b else shape[-1]
        if out_cols < limit and node.name:  # unnamed nodes cannot be excluded by name
            small.append(node.name)
    return small


#: the calibrated recipe (``mlharness calibrate``); recorded beside the model it writes
STATIC_RECIPE = "onnxruntime-quantize_static-qdq-v1"
#: the ops the calibrated recipe quantises
STATIC_OP_TYPES = ("Conv", "MatMul", "Gemm")


def require_fp32_onnx(model: Path) -> None:
    """ModelError unless ``model`` is an fp32 ONNX file, what the ONNX quantisers start from
    (never a model that is already int8: ``m.int8.int8.onnx`` means nothing)."""
    if not model.is_file() or model.suffix != ".onnx":
        raise ModelError(f"calibration needs an fp32 ONNX model, got {model}",
                         hint="pass --model path/to/model.onnx")
    if _is_int8(model):
        raise ModelError(f"{model} is already int8 (a quantised model): calibrate starts from "
                         "the fp32 model", hint="pass the fp32 model it was made from")


def _is_int8(model: Path) -> bool:
    if calibration_path(model) is not None:
        return True
    try:
        return is_quantized(model)
    except Exception:  # noqa: BLE001 - not a readable ONNX file: the quantiser says so later
        return False


def quantize_calibrated(model: Path, target: Path, batches: list[dict], method: str,
                        task: CalibrationTask) -> dict:
    """Static int8 (QDQ: int8 weights per channel, uint8 activations with ranges measured on
    ``batches``) of ``model`` into ``target``; the heads with fewer than
    ``MIN_QUANTISED_OUTPUTS`` output columns stay fp32, and what the ``task`` keeps
    (``kept_fp32``). onnxruntime runs the QDQ file with int8 kernels, and OpenVINO reads the
    same file as int8. Returns what was done (for the calibration record)."""
    import onnxruntime as ort
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat,
                                          QuantType, quantize_static)

    methods = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
               "percentile": CalibrationMethod.Percentile}
    if method not in methods:
        raise ConfigError(f"unknown calibration method {method!r}",
                          hint="use one of: " + ", ".join(methods))

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(batches)

        def get_next(self) -> dict | None:
            return next(self.items, None)

    excluded = small_output_nodes(model) + task.kept_fp32(onnx_ops(model))
    with quantised_file(model, target, "calibrated int8 quantisation",
                         "check the model runs in fp32 first") as tmp:
        quantize_static(str(model), tmp, Reader(), quant_format=QuantFormat.QDQ,
                        op_types_to_quantize=list(STATIC_OP_TYPES), per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        nodes_to_exclude=excluded, calibrate_method=methods[method],
                        extra_options={"MatMulConstBOnly": True})
    return {"recipe": STATIC_RECIPE, "runtime": f"onnxruntime {ort.__version__}",
            "model_format": "QDQ", "weights": "int8 per channel", "activations": "uint8 per tensor",
            "method": method, "op_types": list(STATIC_OP_TYPES), "kept_fp32": excluded}
