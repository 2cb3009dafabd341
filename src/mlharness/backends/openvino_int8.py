"""Calibrated int8 for OpenVINO: NNCF post-training quantisation into an OpenVINO IR.

``mlharness calibrate --backend openvino`` hands the calibration batches to
``nncf.quantize`` on the model as OpenVINO reads it and saves an IR (``.xml`` + ``.bin``) with
int8 FakeQuantize layers that OpenVINO's CPU plugin runs on its VNNI/AMX int8 kernels. The heads
with fewer than ``MIN_QUANTISED_OUTPUTS`` output columns (BERT's QA head) stay fp32, as in the QDQ
recipe for onnxruntime. Weights are saved as they are (``compress_to_fp16=False``): what is not
quantised stays fp32.
"""

from __future__ import annotations

from pathlib import Path

from mlharness.backends.onnx_precision import is_quantized, small_output_nodes
from mlharness.backends.quantised import CalibrationTask, quantised_file
from mlharness.errors import ConfigError

#: bump when the recipe changes
RECIPE = "nncf-ptq-v1-mixed-fp32head"
#: an OpenVINO IR's model file
IR_SUFFIX = ".xml"


def is_ir(model: Path) -> bool:
    return Path(model).suffix == IR_SUFFIX


def holds_quantization(model: Path) -> bool:
    """True for an IR with FakeQuantize layers, or (ONNX) what ``is_quantized`` says."""
    if not is_ir(model):
        return is_quantized(model)
    with Path(model).open(encoding="utf-8", errors="replace") as f:
        return any('type="FakeQuantize"' in line for line in f)


def require_int8(model: Path) -> None:
    """ConfigError unless ``model`` is already int8 (``--precision int8`` never quantises
    silently: OpenVINO runs calibrated models)."""
    if not holds_quantization(model):
        raise ConfigError(
            f"--precision int8 with openvino runs a calibrated int8 model; {model} holds no "
            "quantisation",
            hint=f"build one with: mlharness calibrate -b BENCHMARK --model {model} "
                 "--dataset DATA --backend openvino, then pass the .xml it writes as --model")


def require_nncf(method: str):  # type: ignore[no-untyped-def]
    """The nncf module, or a ConfigError saying how to get it or that ``method`` is not NNCF's."""
    if method != "minmax":
        raise ConfigError(f"calibration method {method!r} is not offered for openvino",
                          hint="NNCF takes min/max ranges: drop --method, or use --backend "
                               "onnxruntime for entropy/percentile")
    try:
        import nncf
    except ImportError as exc:
        raise ConfigError("calibration for openvino needs NNCF, which is not installed",
                          hint="pip install 'mlharness[openvino]' (it brings nncf), or use "
                               "--backend onnxruntime: OpenVINO also runs its QDQ model") from exc
    return nncf


def quantize_nncf(model: Path, target: Path, batches: list[dict], method: str,
                  task: CalibrationTask) -> dict:
    """Int8 IR of ``model`` into ``target`` (``.xml``; the ``.bin`` beside it), activation ranges
    from ``batches`` (NNCF's transformer recipe for a ``task`` that feeds one); returns what was
    done (for the calibration record)."""
    import logging

    import openvino as ov

    nncf = require_nncf(method)
    transformer = task.transformer
    logging.getLogger("nncf").setLevel(logging.WARNING)
    network = ov.Core().read_model(str(model))
    excluded = small_output_nodes(model) + task.kept_fp32(
        [(op.get_friendly_name(), op.get_type_name()) for op in network.get_ordered_ops()])
    with quantised_file(model, target, "NNCF int8 quantisation",
                         "check the model runs in fp32 with --backend openvino first") as tmp:
        quantized = nncf.quantize(
            network, nncf.Dataset(batches), subset_size=max(1, len(batches)),
            preset=nncf.QuantizationPreset.MIXED,
            model_type=nncf.ModelType.TRANSFORMER if transformer else None,
            ignored_scope=nncf.IgnoredScope(names=excluded, validate=False))
        xml = Path(tmp).with_suffix(IR_SUFFIX)
        try:
            ov.save_model(quantized, str(xml), compress_to_fp16=False)
            xml.with_suffix(".bin").replace(target.with_suffix(".bin"))
            xml.replace(tmp)  # quantised_file moves it onto target
        finally:  # what a failed save left
            xml.unlink(missing_ok=True)
            xml.with_suffix(".bin").unlink(missing_ok=True)
    return {"recipe": RECIPE, "runtime": f"nncf {nncf.__version__}, openvino {ov.get_version()}",
            "model_format": "OpenVINO IR (FakeQuantize)",
            "weights": "int8 per channel, symmetric",
            "activations": "int8/uint8 per tensor (MIXED preset: asymmetric activations)",
            "method": method, "kept_fp32": excluded,
            "model_type": "transformer" if transformer else "default"}
