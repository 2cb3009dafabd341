"""PyTorch backend: the official PyTorch model formats, loaded as the reference harnesses do.

* BERT: the fine-tuned checkpoint (``model.pytorch``, a state dict) with ``bert_config.json``
  beside it (or ``--backend-option config=PATH``), as ``language/bert/pytorch_SUT.py`` loads it;
  inputs ``input_ids``/``input_mask``/``segment_ids`` with a dynamic sequence axis; outputs
  ``output_start_logits``/``output_end_logits``.
* ResNet-50: torchvision's weights file (a state dict); the input is the task's image input,
  outputs ``ArgMax:0`` and ``softmax_tensor:0`` over the model's own classes (torchvision's 1000,
  no background class: run with ``--task-option label_offset=0`` and the ``torchvision``
  pre-processing preset, ``--task-option preprocessing=torchvision``).

``--backend-option arch=bert|resnet50`` overrides the detection from the state dict's keys
(:class:`PyTorchOptions`); what each architecture is and allows lives in the registry of
:mod:`mlharness.backends.torch_archs`, never in a branch here.
``--precision bf16`` runs under ``torch.autocast`` (bf16 matmuls/convolutions through oneDNN:
AMX or AVX512_BF16) and is refused where oneDNN has no bf16 path. ``--precision int8`` runs a
calibrated program (``<model>.int8.pt2`` from ``mlharness calibrate --backend pytorch``,
:mod:`mlharness.backends.pytorch_int8`), always compiled; on a BERT checkpoint it quantises the
Linear layers dynamically instead (int8 weights per output channel, activations ranged per
batch; the QA head stays fp32), like onnxruntime's int8 of an fp32 model; on a ResNet-50
checkpoint it is refused (dynamic int8 would leave the convolutions fp32). ResNet-50 runs
channels-last (oneDNN's fast layout for convolutions). ``--backend-option compile=true`` runs the
model through ``torch.compile`` (inductor with freezing; it needs a C++ compiler), compiled and
warmed up at load for the batch sizes the run issues, so no query waits for it.
``--backend-option package=true`` compiles instead into an AOTInductor package kept in the cache
(:mod:`mlharness.backends.torch_package`): built once per model, runtime and CPU in a process of
its own, then loaded in seconds by every later run and tune probe (the run builds no module:
the package holds the weights), as fast per query as ``torch.compile`` (docs/performance.md);
not the default, as it keeps a file per model in the cache. A bf16 package is compiled from the
model under autocast (:class:`torch_models.Bf16Autocast`), the same graph ``compile=true`` runs.
A calibrated int8 program is compiled either way. ONNX files are not read: the one converter
(onnx2torch) is unkept since 2024 and requires torchvision unpinned.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import field_validator

from mlharness.backends.base import Backend, BackendOptions, check_index_ranges
from mlharness.backends.pytorch_int8 import (PROGRAM_SUFFIX, export_dims, is_program,
                                            load_exported, load_program, quantize_pt2e,
                                            require_pt2e)
from mlharness.backends.quantised import (MIN_QUANTISED_OUTPUTS, CalibrationTask, Quantiser,
                                         calibration_record, refuse_mislabelled)
from mlharness.backends.torch_archs import ARCHS, TorchArch, arch_named, detect
from mlharness.backends.torch_compile import (batches_to_compile, compile_at_load, padded_to_two,
                                              require_compiler)
from mlharness.backends.torch_package import Package, load_or_build, package_path
from mlharness.errors import ConfigError, ModelError, one_line
from mlharness.files import cache_root
from mlharness.names import Precision
from mlharness.options import Options
from mlharness.tensors import TensorSpec


def bf16_supported() -> bool:
    """oneDNN's own answer: bf16 kernels exist on this CPU (AVX512_BF16 or AMX)."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def _state_dict(path: Path) -> dict[str, Any]:
    import torch

    try:
        # mapped, not read (torch's zip format; the legacy one is read): the module copies
        # the weights, so they are in memory once
        obj = torch.load(str(path), map_location="cpu", weights_only=True,
                         mmap=zipfile.is_zipfile(path))
    except Exception as exc:  # torch raises assorted types for foreign files
        raise ModelError(f"torch cannot read {path}: {one_line(exc, 200)}",
                         hint="pass a state dict saved with torch.save") from exc
    # best_model_state_dict: 3D-UNet's training checkpoint (pytorch_checkpoint_SUT.py)
    for key in ("state_dict", "model", "best_model_state_dict"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
    if not isinstance(obj, dict):
        raise ModelError(f"{path} is not a state dict", hint="pass a state dict (torch.save)")
    # old TF-converted BERT checkpoints name LayerNorm parameters gamma/beta
    return {k.replace("LayerNorm.gamma", "LayerNorm.weight")
            .replace("LayerNorm.beta", "LayerNorm.bias"): v for k, v in obj.items()}


def _arch_config(arch: TorchArch, model: Path, options: BackendOptions
                 ) -> dict[str, Any] | None:
    """The architecture's config file beside the checkpoint (BERT's ``bert_config.json``), or
    the one ``config=PATH`` names; None for an architecture without one."""
    if arch.config_file is None:
        return None
    # lazy: torch_models imports torch, which this module loads only with a model
    from mlharness.backends.torch_models import read_bert_config

    path = options.extra_as(PyTorchOptions).config or model.with_name(arch.config_file)
    if not path.is_file():
        raise ModelError(f"no {arch.name} config at {path}",
                         hint=f"put {arch.config_file} beside the checkpoint or pass "
                              "--backend-option config=PATH")
    try:
        return read_bert_config(path)
    except (ValueError, OSError) as exc:
        raise ModelError(f"bad {arch.name} config: {exc}",
                         hint=f"use the official {arch.config_file}") from None


def _embedding_rows(state: dict[str, Any]) -> dict[str, int]:
    """BERT's embedding tables' rows, by the input that indexes each (from the weights'
    shapes: a package run never builds the module); none for a ResNet."""
    tables = {"input_ids": "word_embeddings.weight", "segment_ids": "token_type_embeddings.weight"}
    return {name: int(tensor.shape[0]) for name, suffix in tables.items()
            for key, tensor in state.items() if key.endswith(suffix)}


def _refuse_dynamic_int8(arch: TorchArch, options: BackendOptions) -> None:
    """``--precision int8`` of a checkpoint is dynamic int8 of its Linear layers, eager, where
    the architecture allows it (BERT)."""
    if not arch.dynamic_int8:
        raise ConfigError(f"int8 of a {arch.name} checkpoint on the pytorch backend needs a "
                          "calibrated program (dynamic quantisation would leave its "
                          "convolutions in fp32)",
                          hint="mlharness calibrate -b BENCHMARK --backend pytorch --model "
                               "CHECKPOINT --dataset DATA, then pass the .int8.pt2 it writes")
    if options.extra_as(PyTorchOptions).compiles:
        raise ConfigError("torch.compile does not run dynamically quantised Linear layers",
                          hint="drop --backend-option compile=true/package=true for "
                               "--precision int8, or calibrate: mlharness calibrate "
                               "--backend pytorch")


class PyTorchOptions(Options):
    """``--backend-option`` keys of the pytorch backend."""

    #: an architecture of torch_archs.ARCHS; None: told from the state dict's keys
    arch: str | None = None

    @field_validator("arch")
    @classmethod
    def _known_arch(cls, value: str | None) -> str | None:
        if value is not None and value not in ARCHS:
            raise ValueError(f"unknown arch {value!r}; known: {', '.join(ARCHS)}")
        return value
    config: Path | None = None  # BERT's bert_config.json; None: the one beside the checkpoint
    compile: bool = False  # torch.compile, warmed up at load
    #: compile into an AOTInductor package kept in the cache, loaded from there by later runs
    package: bool = False

    @property
    def compiles(self) -> bool:
        """Whether the model is compiled at load (torch.compile or a package)."""
        return self.compile or self.package


#: how much longer than the stall timeout loading may take with torch.compile: compiling
#: ResNet-50 took 20-45 s on two idle cores, and several times that beside other jobs
COMPILE_ALLOWANCE_S = 600.0


def require_checkpoint(model: Path) -> None:
    """ModelError unless ``model`` is a file PT2E may start from: the fp32 checkpoint, not an
    ONNX model nor an int8 program."""
    if not model.is_file() or model.suffix in (".onnx", PROGRAM_SUFFIX):
        raise ModelError(f"calibration for pytorch needs the fp32 checkpoint, got {model}",
                         hint="pass --model model.pytorch (BERT, with bert_config.json "
                              "beside it) or resnet50.pth")


def quantize_checkpoint(model: Path, target: Path, batches: list[dict[str, np.ndarray]],
                        method: str, task: CalibrationTask) -> dict[str, Any]:
    """The checkpoint loaded in fp32 as a pytorch run loads it (its tables checked against what
    ``task`` feeds), then quantised by PT2E into the program ``target``."""
    backend = PyTorchBackend()
    backend.load(model, BackendOptions(precision=Precision.FP32,
                                       task_inputs=list(task.model_inputs),
                                       extra=PyTorchOptions()))
    check_index_ranges(task.index_ranges(), backend.index_limits, str(model))
    names = [spec.name for spec in backend.inputs]
    return quantize_pt2e(backend.net, backend.arch.name, backend.arch.sequence_axis, names,
                         target, batches, method)


class PyTorchBackend(Backend):
    name = "pytorch"
    options_model = PyTorchOptions
    #: the catalogue's model files it reads
    model_framework = "pytorch"
    reads_model_file = True
    model_hint = "pass --model model.pytorch (BERT) or resnet50.pth"
    #: ``mlharness calibrate --backend pytorch``: a PT2E int8 program of the checkpoint (its
    #: tables are known once it is loaded: ``quantize_checkpoint`` checks them)
    quantiser = Quantiser(
        PROGRAM_SUFFIX, "PyTorch runs the PT2E-quantised program compiled by inductor "
                        "(oneDNN int8 kernels)",
        check_source=require_checkpoint, quantise=quantize_checkpoint, check_method=require_pt2e)
    #: ``--instances`` call one module (and its compiled graphs) from their own threads
    shares_model = True

    def load_allowance_s(self, options: BackendOptions, model: Path | None = None) -> float:
        """Seconds loading may take beyond the stall timeout: compiling is not a stall."""
        compiles = (options.extra_as(PyTorchOptions).compiles
                    or (model is not None and is_program(model)))
        return COMPILE_ALLOWANCE_S if compiles else 0.0

    def __init__(self) -> None:
        self.net: Any = None
        self.arch: TorchArch = ARCHS["resnet50"]  # set by load
        self.model: Path | None = None
        self.options = BackendOptions()
        self.forward: Any = None  # the model, or what it was compiled into
        self.compiled_batches: list[int] = []  # the batch sizes torch.compile compiled at load
        self.package: Package | None = None  # with package=true: what forward runs
        self._inputs: list[TensorSpec] = []
        self.calibration: dict[str, Any] | None = None  # beside a calibrated program
        self.config: dict[str, Any] | None = None  # BERT's bert_config.json
        self._index_limits: dict[str, int] = {}

    def load(self, model: Path | None, options: BackendOptions) -> None:
        import torch

        model = self.model_file(model)
        if model.suffix == ".onnx":
            raise ModelError("the pytorch backend reads PyTorch state dicts, not ONNX",
                             hint="use --backend onnxruntime or openvino for ONNX models")
        if options.device != "cpu":
            raise ConfigError("the pytorch backend is built for cpu here",
                              hint="drop --device or use --device cpu")
        if options.precision == "bf16" and not bf16_supported():
            raise ConfigError("this CPU has no bf16 path in PyTorch (oneDNN)",
                              hint="bf16 needs AVX512_BF16 or AMX; use --precision fp32")
        if options.threads:
            torch.set_num_threads(int(options.threads))
        self.calibration = calibration_record(model)
        if is_program(model):
            self._load_program(model, options)
            return
        refuse_mislabelled(model, options.precision)
        state = _state_dict(model)
        opts = options.extra_as(PyTorchOptions)
        arch = arch_named(opts.arch, str(model)) if opts.arch else detect(state, str(model))
        if options.precision == "int8":
            _refuse_dynamic_int8(arch, options)
        self._inputs = arch.inputs(options.task_inputs)
        self.config = _arch_config(arch, model, options)
        self.arch, self.model, self.options = arch, model, options
        self._index_limits = _embedding_rows(state)
        if opts.package:  # it holds the weights; a build loads the model itself
            del state
            self.forward = self._packaged()
            return
        self.net = self._module(state).eval()
        del state  # the module holds copies: not a second set of weights while it compiles
        if options.precision == "int8":
            self.net = self._dynamic_int8(self.net)
        if arch.channels_last:
            self.net = self.net.to(memory_format=torch.channels_last)
        self.forward = self._compiled() if opts.compiles else self.net

    def load_shared(self, first: Backend, options: BackendOptions) -> None:
        """Another instance of ``first``: its module and compiled graphs, called from this
        instance's pinned worker (a module runs from several threads at once, compiled or
        not), so N instances load and compile once and hold one copy of the weights."""
        assert isinstance(first, PyTorchBackend), first
        import torch

        if options.threads:
            torch.set_num_threads(int(options.threads))
        vars(self).update(vars(first))
        self.options = options

    def _load_program(self, model: Path, options: BackendOptions) -> None:
        """A calibrated int8 program, compiled at load (its int8 kernels exist only compiled)."""
        if options.precision != "int8":
            raise ConfigError(f"{model} is a calibrated int8 program, but --precision is "
                              f"{options.precision}",
                              hint="pass --precision int8 (the run then records the calibration)")
        arch = arch_named(str(options.extra_as(PyTorchOptions).arch
                              or (self.calibration or {}).get("arch") or ""),
                          f"{model}: no calibration record beside it")
        self._inputs = arch.inputs(options.task_inputs)
        self.net = load_program(model)
        self.arch, self.model, self.options = arch, model, options
        self._index_limits = _embedding_rows(self.net.state_dict())
        self.forward = self._compiled()

    @staticmethod
    def _dynamic_int8(net: Any) -> Any:
        """BERT's Linear layers quantised dynamically (int8 weights per output channel, int8
        activations ranged per batch), as ``--precision int8`` does for an fp32 model on
        onnxruntime; heads with fewer than 16 outputs (the QA head) stay fp32."""
        import torch
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        spec = {name: per_channel_dynamic_qconfig for name, m in net.named_modules()
                if isinstance(m, torch.nn.Linear) and m.out_features >= MIN_QUANTISED_OUTPUTS}
        # torch 2.13 still has torch.ao quantisation but calls it deprecated (torchao is its
        # successor): the pinned version is what runs, so its warnings are not the user's
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch.ao.quantization is deprecated",
                                    category=DeprecationWarning)
            warnings.filterwarnings("ignore", message=".*quantize_per_.*deprecated",
                                    category=UserWarning)
            return quantize_dynamic(net, spec, dtype=torch.qint8)

    def _module(self, state: dict[str, Any]) -> Any:
        """The architecture's module holding the checkpoint's weights."""
        net = self.arch.build(state, self.config)
        missing, _unexpected = net.load_state_dict(state, strict=False)  # pooler etc. unused
        wanted = [k for k in missing if not k.endswith("num_batches_tracked")]
        if wanted:
            raise ModelError(f"{self.model} lacks {len(wanted)} weight(s), e.g. {wanted[0]}",
                             hint="pass the checkpoint of this architecture (or set arch=...)")
        return net

    def _compiled(self) -> Any:
        """The model compiled now: with ``package=true`` its package, else ``torch.compile``
        for the batch sizes the run issues (BERT: every axis dynamic)."""
        if self.options.extra_as(PyTorchOptions).package:
            return self._packaged()
        self.compiled_batches = batches_to_compile(self.options.scenario,
                                                   self.options.batch_size)
        return compile_at_load(self.net, self.arch.sequence_axis, self.compiled_batches,
                               self._warm)

    def _packaged(self) -> Any:
        """The model's package from the cache, built and kept there first if it is not."""
        require_compiler()
        assert self.model is not None
        derived = {"arch": self.arch.name, "precision": self.options.precision,
                   "bert_config": self.config, "inputs": self._inputs[0].name}
        path = package_path(cache_root(self.options.cache_dir), self.model, derived)
        runners = self.options.instances
        self.net = None  # the package holds the weights (a build loads the model afresh)
        self.package = load_or_build(
            path, functools.partial(exported_for_package, self.model, self.options), runners)
        return self.package.runner

    def _exported(self) -> Any:
        """The module exported with a dynamic batch axis (and BERT's sequence axis); bf16: the
        module under autocast."""
        import torch

        # lazy: torch_models imports torch, which this module loads only with a model
        from mlharness.backends.torch_models import Bf16Autocast

        names = [s.name for s in self._inputs]
        net, dims = self.net, export_dims(names, self.arch.sequence_axis)
        if self.options.precision == "bf16":  # its forward takes *inputs: one argument
            net, dims = Bf16Autocast(net), (dims,)  # type: ignore[assignment]
        return torch.export.export(net, self._tensors(self._sample(2)), dynamic_shapes=dims)

    def _sample(self, batch: int) -> dict[str, np.ndarray]:
        return self.arch.sample(self._inputs, batch)

    def _warm(self, forward: Any, batch: int) -> None:
        self._run(forward, self._sample(batch))

    def _quantization(self) -> str | None:
        if self.options.precision != "int8":
            return None
        if self.model is not None and is_program(self.model):
            return "calibrated int8 program (PT2E, torchao X86InductorQuantizer), compiled"
        return ("dynamic int8, per-channel weights, Linear layers with >= "
                f"{MIN_QUANTISED_OUTPUTS} outputs (torch.ao quantize_dynamic)")

    @property
    def inputs(self) -> list[TensorSpec]:
        return self._inputs

    @property
    def index_limits(self) -> dict[str, int]:
        return self._index_limits

    def _autocast(self) -> Any:
        if self.options.precision == "bf16":
            # lazy: torch_models imports torch, which this module loads only with a model
            from mlharness.backends.torch_models import bf16_autocast

            return bf16_autocast()
        return contextlib.nullcontext()

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.compiled_batches and 1 not in self.compiled_batches and \
                len(next(iter(inputs.values()))) == 1:  # a tail batch of one
            return padded_to_two(lambda doubled: self._run(self.forward, doubled), inputs)
        return self._run(self.forward, inputs)

    def _run(self, forward: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        with torch.inference_mode(), self._autocast():
            return self.arch.outputs(forward(*self._tensors(inputs)))

    def _tensors(self, inputs: dict[str, np.ndarray]) -> tuple[Any, ...]:
        """The model's arguments, in its inputs' order (channels-last where it runs so)."""
        return self.arch.tensors(inputs, self._inputs)

    def describe(self) -> dict[str, Any]:
        import torch

        return {"name": self.name, "torch": torch.__version__, "arch": self.arch.name,
                "threads": torch.get_num_threads(), "precision": self.options.precision,
                "autocast": "bf16" if self.options.precision == "bf16" else None,
                "quantization": self._quantization(),
                "calibration": self.calibration,
                "compiled": self.forward is not self.net,
                "compiled_batches": [("dynamic" if b > 1 else b) for b in self.compiled_batches]
                or None,
                "compiled_package": self.package.describe() if self.package else None,
                "notes": [self.package.note()] if self.package else [],
                "channels_last": self.arch.channels_last,
                "onednn_bf16": bf16_supported(), "model": str(self.model)}


def exported_for_package(model: Path, options: BackendOptions) -> Any:
    """The program a package of ``model`` is compiled from, made afresh in the build's own
    process: a calibrated int8 program as saved, else the module loaded as a run loads it
    (without compiling) and exported."""
    if is_program(model):
        return load_exported(model)
    backend = PyTorchBackend()
    plain = options.extra_as(PyTorchOptions).model_copy(update={"compile": False,
                                                                "package": False})
    backend.load(model, dataclasses.replace(options, extra=plain))
    return backend._exported()
