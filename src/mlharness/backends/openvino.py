"""OpenVINO backend: the ONNX model read directly, compiled for the CPU with per-scenario hints.

* Performance hint: ``THROUGHPUT`` (several streams) for Offline and Server, ``LATENCY`` (one
  stream, every core) for SingleStream and MultiStream; ``--backend-option performance_hint=...``
  and ``num_streams=N`` override it (:class:`OpenVinoOptions`).
* Precision: ``fp32`` pins ``INFERENCE_PRECISION_HINT=f32`` (OpenVINO would otherwise pick bf16
  by itself on AMX CPUs); ``bf16`` asks for bf16 and is refused where the CPU plugin has no bf16
  (``OPTIMIZATION_CAPABILITIES``); ``int8`` runs a calibrated model (``mlharness calibrate``:
  the NNCF IR ``.xml`` it writes for openvino, or the QDQ ONNX it writes for onnxruntime) and is
  refused for a model that holds no quantisation. What an int8 model leaves unquantised
  (attention's softmax, LayerNorm, GELU, the fp32 heads) runs in fp32 unless
  ``--backend-option unquantised=bf16`` asks for bf16 (recorded in ``run.json``; only with int8).
* Models: ONNX read directly, or an OpenVINO IR (``.xml`` with its ``.bin``).
* Dynamic shapes (BERT's sequence axis) are compiled as such; one batch is split over the
  compiled model's infer requests so all streams work on it.
* A run's worker process allocates from one malloc arena (:func:`one_malloc_arena`, issue 38:
  OpenVINO's matmul kernels read past the end of a buffer).
* ``--backend-option snippets=true|false`` sets OpenVINO's snippets (its own JIT kernels for
  fused subgraphs such as attention); by default OpenVINO decides.
"""

from __future__ import annotations

import ctypes
import os
import queue
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BeforeValidator

from mlharness.backends.base import Backend, BackendOptions
from mlharness.backends.onnx_precision import require_fp32_onnx
from mlharness.backends.onnx_shapes import onnx_index_limits
from mlharness.backends.openvino_int8 import IR_SUFFIX, quantize_nncf, require_int8, require_nncf
from mlharness.backends.quantised import Quantiser, calibration_record, refuse_mislabelled
from mlharness.errors import ConfigError, ModelError, one_line
from mlharness.hostinfo import matrix_isa
from mlharness.options import Options
from mlharness.tensors import TensorSpec

#: LoadGen scenario -> OpenVINO performance hint
SCENARIO_HINTS = {"Offline": "THROUGHPUT", "Server": "THROUGHPUT",
                  "SingleStream": "LATENCY", "MultiStream": "LATENCY"}
Hint = Literal["THROUGHPUT", "LATENCY", "CUMULATIVE_THROUGHPUT"]
#: measured on an AVX2-only AMD EPYC (docs/performance.md): OpenVINO runs int8 FullyConnected
#: layers there with oneDNN's jit_gemm_I8, no faster than fp32 (BERT 0.589 vs 0.584 samples/s)
NO_VNNI_NOTE = ("this CPU has no VNNI: OpenVINO's int8 fully-connected layers (all of BERT's "
                "matrix work) are no faster than fp32 here; its int8 convolutions still gain, and "
                "onnxruntime's --precision int8 doubled BERT's fp32 rate on such a CPU")


def precision_notes(precision: str, int8_isa: str | None) -> list[str]:
    """What a user of ``--precision`` should know about this CPU (shown under the result)."""
    return [NO_VNNI_NOTE] if precision == "int8" and int8_isa == "avx2" else []


#: Issue 38, the cause (OpenVINO 2026.4.1, AMD EPYC with AVX-512 and no AMX; a core of a dead
#: run under gdb): a stream thread's JIT matmul kernel (``vmovups (%r10),%zmm21`` beside
#: ``vfmadd231ps ...{1to16}``) read 128 bytes past the end of the mapped part of a glibc thread
#: heap, where the other stream's buffer had ended. A thread heap grows page by page with no
#: slack beyond its top, so a kernel that reads a little past its buffer dies only when the
#: buffer happens to end there: rarely, more under load, in any precision, with snippets on or
#: off. With every thread on the main heap (one arena), whose top always keeps free room, the
#: read stays in mapped memory. ``mallopt`` is glibc's; M_ARENA_MAX is -8 in its malloc.h.
M_ARENA_MAX = -8
ONE_ARENA_NOTE = ("one malloc arena (glibc M_ARENA_MAX=1): OpenVINO's matmul kernels read past "
                  "the end of a buffer, which killed runs by SIGSEGV when it ended a thread's "
                  "heap (issue 38)")


def one_malloc_arena() -> bool:
    """Every thread started from now on allocates from glibc's main heap; False where the C
    library has no ``mallopt`` (not glibc). Call it before any other thread starts: a thread
    already running keeps its own arena, and later threads may share it."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, 1))


SNIPPETS_OFF = "snippets off: --backend-option snippets=false"  # recorded in run.json

#: --precision -> INFERENCE_PRECISION_HINT (int8 models keep fp32 for what is not quantised)
PRECISION_HINTS = {"fp32": "f32", "bf16": "bf16", "int8": "f32"}


def _text(value: Any) -> str:
    """A compiled-model property as plain text (element types as their short name: f32, bf16)."""
    return value.get_type_name() if hasattr(value, "get_type_name") else str(value)


def _dim(d: Any) -> int | None:
    return d.get_length() if d.is_static else None


def _index_limits(model: Any) -> dict[str, int]:
    """``{input: rows}`` for each model input that indexes a table (a Gather on axis 0 of a
    tensor with a fixed first dimension, such as BERT's word embeddings)."""
    limits: dict[str, int] = {}
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Gather" or op.get_input_size() < 3:
            continue
        axis = op.input_value(2).get_node()
        if axis.get_type_name() != "Constant" or axis.get_data().reshape(-1).tolist() != [0]:
            continue
        source = op.input_value(1).get_node()
        while source.get_type_name() in ("Convert", "Reshape", "Unsqueeze", "Squeeze"):
            source = source.input_value(0).get_node()
        rows = op.get_input_partial_shape(0)
        if source.get_type_name() == "Parameter" and rows.rank.is_static and rows[0].is_static:
            name = source.output(0).get_any_name()
            limits[name] = min(limits.get(name, rows[0].get_length()), rows[0].get_length())
    return limits


class OpenVinoOptions(Options):
    """``--backend-option`` keys of the openvino backend."""

    #: None: from the scenario (SCENARIO_HINTS); any letter case
    performance_hint: Annotated[Hint | None,
                                BeforeValidator(lambda v: v if v is None else str(v).upper())] = None
    num_streams: str | None = None  # a number or AUTO; None: the hint decides
    pin_threads: bool | None = None  # ENABLE_CPU_PINNING; None: OpenVINO's default
    #: --precision int8: the precision of the operations left unquantised (None: fp32)
    unquantised: Literal["fp32", "bf16"] | None = None
    snippets: bool | None = None  # OpenVINO's SNIPPETS_MODE; None: OpenVINO's default


class OpenVinoBackend(Backend):
    name = "openvino"
    options_model = OpenVinoOptions
    #: the catalogue's model files it reads (it also reads an IR, which no artefact is)
    model_framework = "onnx"
    reads_model_file = True
    model_hint = "pass --model path/to/model.onnx"
    #: ``mlharness calibrate --backend openvino``: NNCF's int8 IR of the ONNX model
    quantiser = Quantiser(
        IR_SUFFIX, "OpenVINO runs the NNCF-quantised IR with its int8 kernels",
        check_source=require_fp32_onnx, quantise=quantize_nncf, check_method=require_nncf,
        index_limits=onnx_index_limits, beside=(".bin",))
    #: what :meth:`prepare_process` did to this process (None: nothing)
    process_note: str | None = None
    #: the environment of a process started to run this backend (Ray actors, whose threads run
    #: before they know their backend): glibc reads it at the start, before any thread
    process_env = {"MALLOC_ARENA_MAX": "1"}

    @staticmethod
    def prepare_process() -> None:
        """Before the process starts any other thread: one malloc arena (:data:`M_ARENA_MAX`).
        A process started with :attr:`process_env` has had it from its start."""
        if os.environ.get("MALLOC_ARENA_MAX") == "1":
            OpenVinoBackend.process_note = ONE_ARENA_NOTE + "; MALLOC_ARENA_MAX=1 from its start"
        elif one_malloc_arena():
            OpenVinoBackend.process_note = ONE_ARENA_NOTE

    def __init__(self) -> None:
        self.compiled: Any = None
        self.model: Path | None = None
        self.options = BackendOptions()
        self.config: dict[str, Any] = {}
        self._requests: queue.Queue = queue.Queue()
        self._outputs: list[str] = []
        #: the tables the model's integer inputs index (an optional extra of the Backend protocol)
        self._index_limits: dict[str, int] = {}

    def load(self, model: Path | None, options: BackendOptions) -> None:
        import openvino as ov

        model = self.model_file(model)
        if options.device != "cpu":
            raise ConfigError(f"the openvino backend runs on cpu, not {options.device!r}",
                              hint="drop --device or use --device cpu")
        if options.precision not in PRECISION_HINTS:
            raise ConfigError(f"unknown precision {options.precision!r}",
                              hint="use fp32, bf16 or int8")
        core = ov.Core()
        caps = [str(c) for c in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")]
        unquantised = options.extra_as(OpenVinoOptions).unquantised
        if unquantised is not None and options.precision != "int8":
            raise ConfigError(f"unquantised={unquantised} is for int8 models, not --precision "
                              f"{options.precision}", hint="add --precision int8 with a "
                              "calibrated model, or drop the option")
        if "bf16" in (options.precision, unquantised) and "BF16" not in caps:
            raise ConfigError(
                f"this CPU has no bf16 path in OpenVINO (capabilities: {', '.join(caps)})",
                hint="bf16 needs AVX512_BF16 or AMX; use --precision fp32, or int8 "
                     "without unquantised=bf16")
        refuse_mislabelled(model, options.precision)
        if options.precision == "int8":
            require_int8(model)
        self.calibration = calibration_record(model)
        self.config = self._config(options)
        try:
            read = core.read_model(str(model))
            self.compiled = core.compile_model(read, "CPU", self.config)
        except Exception as exc:  # openvino raises RuntimeError with long multi-line texts
            detail = one_line(exc)
            raise ModelError(f"openvino cannot load {model}: {detail}",
                             hint="check that the file is a valid ONNX model or OpenVINO "
                                  "IR (.xml with its .bin)") from exc
        self._index_limits = _index_limits(read)
        n = int(self.compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        for _ in range(max(1, n)):
            self._requests.put(self.compiled.create_infer_request())
        self._outputs = [o.get_any_name() for o in self.compiled.outputs]
        self.model = model
        self.options = options
        self.capabilities = caps

    @staticmethod
    def _config(options: BackendOptions) -> dict[str, Any]:
        extra = options.extra_as(OpenVinoOptions)
        hint = extra.performance_hint or SCENARIO_HINTS.get(str(options.scenario), "LATENCY")
        precision = PRECISION_HINTS[extra.unquantised or options.precision]
        config: dict[str, Any] = {"PERFORMANCE_HINT": hint, "INFERENCE_PRECISION_HINT": precision}
        if options.threads:
            config["INFERENCE_NUM_THREADS"] = int(options.threads)
        if extra.num_streams is not None:
            config["NUM_STREAMS"] = extra.num_streams
        elif options.cpus:  # one of several instances (--instances): one stream each
            config["NUM_STREAMS"] = "1"
        if extra.pin_threads is not None:
            config["ENABLE_CPU_PINNING"] = extra.pin_threads
        if extra.snippets is not None:
            config["SNIPPETS_MODE"] = "ENABLE" if extra.snippets else "DISABLE"
        return config

    @property
    def index_limits(self) -> dict[str, int]:
        return self._index_limits

    @property
    def inputs(self) -> list[TensorSpec]:
        return [TensorSpec(p.get_any_name(), str(p.get_element_type().to_dtype()),
                           tuple(_dim(d) for d in p.get_partial_shape()))
                for p in self.compiled.inputs]

    @property
    def outputs(self) -> list[str]:
        return list(self._outputs)

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one batch, split over as many idle infer requests as there are (at least one).

        Only the first request is waited for; the others are taken if free, so concurrent
        callers never deadlock on the pool."""
        n = len(next(iter(inputs.values())))
        held = [self._requests.get()]
        while len(held) < n:
            try:
                held.append(self._requests.get_nowait())
            except queue.Empty:
                break
        try:
            bounds = np.linspace(0, n, len(held) + 1).astype(int)
            for req, a, b in zip(held, bounds[:-1], bounds[1:]):
                req.start_async({k: np.ascontiguousarray(v[a:b]) for k, v in inputs.items()})
            parts = []
            for req in held:
                req.wait()
                parts.append([req.get_output_tensor(i).data.copy()
                              for i in range(len(self._outputs))])
        finally:
            for req in held:
                self._requests.put(req)
        if len(parts) == 1:
            return dict(zip(self._outputs, parts[0]))
        return {name: np.concatenate([p[i] for p in parts])
                for i, name in enumerate(self._outputs)}

    def describe(self) -> dict[str, Any]:
        import openvino as ov

        out: dict[str, Any] = {"name": self.name, "openvino": ov.get_version(),
                               "threads": self.options.threads,
                               "cpus": self.options.cpus,
                               "precision": self.options.precision, "model": str(self.model),
                               "config": self.config,
                               "calibration": getattr(self, "calibration", None)}
        if self.compiled is not None:
            out["compiled"] = {key: _text(self.compiled.get_property(key)) for key in
                               ("PERFORMANCE_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS",
                                "INFERENCE_PRECISION_HINT", "OPTIMAL_NUMBER_OF_INFER_REQUESTS")}
            out["cpu_capabilities"] = self.capabilities
        notes = precision_notes(self.options.precision, matrix_isa()["int8"])
        if self.options.extra_as(OpenVinoOptions).snippets is False:
            out["snippets"] = SNIPPETS_OFF
        if self.process_note:
            out["process"] = self.process_note
        if notes:
            out["notes"] = notes
        return out
