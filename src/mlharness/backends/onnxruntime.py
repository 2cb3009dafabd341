"""onnxruntime backend: one InferenceSession shared by the SUT engine's worker threads."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np

from mlharness.backends.base import Backend, BackendOptions
from mlharness.backends.onnx_precision import (prepared_model, quantize_calibrated,
                                              require_fp32_onnx)
from mlharness.backends.onnx_shapes import onnx_declared_inputs, onnx_index_limits
from mlharness.backends.openvino_int8 import is_ir
from mlharness.backends.quantised import Quantiser, calibration_record
from mlharness.errors import ConfigError, ModelError, one_line
from mlharness.options import Options
from mlharness.tensors import TensorSpec

# onnx type strings -> numpy dtype names
_ONNX_TYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
}

_OPT_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
               "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}


def _dim(d: Any) -> int | None:
    return d if isinstance(d, int) and d > 0 else None


class OnnxRuntimeOptions(Options):
    """``--backend-option`` keys of the onnxruntime backend."""

    graph_optimization: Literal["disable", "basic", "extended", "all"] = "all"


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    options_model = OnnxRuntimeOptions
    #: the catalogue's model files it reads
    model_framework = "onnx"
    reads_model_file = True
    model_hint = "pass --model path/to/model.onnx"
    #: ``mlharness calibrate --backend onnxruntime``: a static QDQ model
    quantiser = Quantiser(
        ".onnx", "onnxruntime runs the QDQ model with int8 kernels (OpenVINO reads it too)",
        check_source=require_fp32_onnx, quantise=quantize_calibrated,
        index_limits=onnx_index_limits)

    def __init__(self) -> None:
        self.session: Any = None
        self.model: Path | None = None
        self.source_model: Path | None = None
        self.options = BackendOptions()

    @staticmethod
    def declared_inputs(model: Path) -> list[TensorSpec] | None:
        """The inputs the ONNX file declares, read without loading its weights."""
        return onnx_declared_inputs(model) if Path(model).suffix == ".onnx" else None

    @staticmethod
    def framework() -> str:
        from importlib import metadata

        try:
            return f"ONNX Runtime {metadata.version('onnxruntime')}"
        except metadata.PackageNotFoundError:
            return "ONNX Runtime"

    def load(self, model: Path | None, options: BackendOptions) -> None:
        import onnxruntime as ort

        model = self.model_file(model)
        if is_ir(model):
            raise ModelError(f"{model} is an OpenVINO IR, which onnxruntime cannot read",
                             hint="run it with --backend openvino, or pass the ONNX model")
        # fp32 runs the file as given; int8 quantises it (cached); bf16 is refused on CPU
        self.source_model = model
        model = prepared_model(model, options.precision, options.cache_dir)
        so = ort.SessionOptions()
        if options.threads:
            so.intra_op_num_threads = options.threads
        so.inter_op_num_threads = 1
        cpus = options.cpus
        if cpus and options.threads and options.threads > 1:
            # one instance of several: its pool threads (threads - 1; the caller is the first)
            # on its own cores, numbered from 1 as onnxruntime counts them
            so.add_session_config_entry("session.intra_op_thread_affinities",
                                        ";".join(str(c + 1) for c in cpus[1:options.threads]))
        level = options.extra_as(OnnxRuntimeOptions).graph_optimization
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _OPT_LEVELS[level])
        available = ort.get_available_providers()
        if options.device not in ("cpu", "cuda"):
            raise ConfigError(f"unknown device {options.device!r} for onnxruntime",
                              hint="use --device cpu or --device cuda")
        if options.device == "cuda":
            if "CUDAExecutionProvider" not in available:
                raise ConfigError("--device cuda but onnxruntime has no CUDA provider",
                                  hint="pip install onnxruntime-gpu, or use --device cpu")
            providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
        else:
            providers = ["CPUExecutionProvider"]
        try:
            self.session = ort.InferenceSession(str(model), so, providers=providers)
        except Exception as exc:  # onnxruntime raises its own exception types
            detail = one_line(exc)
            raise ModelError(f"onnxruntime cannot load {model}: {detail}",
                             hint="check that the file is a valid ONNX model") from exc
        self.model = model
        self.options = options

    @property
    def index_limits(self) -> dict[str, int]:
        """The tables the model's integer inputs index, read from the file (weights skipped)."""
        return onnx_index_limits(self.model) if self.model and self.model.suffix == ".onnx" \
            else {}

    @property
    def inputs(self) -> list[TensorSpec]:
        return [
            TensorSpec(i.name, _ONNX_TYPES.get(i.type, i.type), tuple(_dim(d) for d in i.shape))
            for i in self.session.get_inputs()
        ]

    @property
    def outputs(self) -> list[str]:
        return [o.name for o in self.session.get_outputs()]

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        results = self.session.run(None, inputs)
        return dict(zip(self.outputs, results))

    def describe(self) -> dict[str, Any]:
        import onnxruntime as ort

        return {
            "name": self.name,
            "framework": f"ONNX Runtime {ort.__version__}",
            "onnxruntime": ort.__version__,
            "providers": self.session.get_providers() if self.session else [],
            "threads": self.options.threads,
            "cpus": self.options.cpus,
            "precision": self.options.precision,
            "model": str(self.source_model),
            "model_run": str(self.model),
            "calibration": calibration_record(self.model) if self.model else None,
        }
