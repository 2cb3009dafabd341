"""Calibrated int8 for PyTorch: PT2E post-training quantisation (torchao) of a torch.export program.

``mlharness calibrate --backend pytorch`` loads the official checkpoint as the pytorch backend
does (fp32), exports it with ``torch.export`` (the batch axis dynamic, and BERT's sequence axis),
annotates it with torchao's ``X86InductorQuantizer`` (int8 weights per output channel, uint8
activations per tensor), measures activation ranges on the calibration batches with min/max
observers, converts it and saves the program, ``<model>.int8.pt2`` (``torch.export.save``).

A run loads that program and always compiles it (inductor, with freezing): only then do the
quantised Linear and convolution patterns become oneDNN int8 kernels. Run eagerly, its quantise /
dequantise pairs would cost more than fp32 does. Layers with fewer than ``MIN_QUANTISED_OUTPUTS``
outputs (BERT's QA head) stay fp32, as in the ONNX and NNCF recipes. On a CPU without VNNI the
activations keep 7 bits (``reduce_range``), as torchao advises for such CPUs: AVX2's u8 x s8
instruction saturates its int16 sums otherwise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from mlharness.backends.quantised import MIN_QUANTISED_OUTPUTS, quantised_file, quiet_loggers
from mlharness.errors import ConfigError, ModelError, one_line
from mlharness.hostinfo import matrix_isa

#: bump when the recipe changes
RECIPE = "torchao-pt2e-x86inductor-v1-minmax-fp32head"
#: the file ``torch.export.save`` writes
PROGRAM_SUFFIX = ".pt2"
#: the largest batch and BERT sequence the exported program accepts
MAX_BATCH = 4096
MAX_SEQUENCE = 512


def is_program(model: Path) -> bool:
    return Path(model).suffix == PROGRAM_SUFFIX


def import_torchao() -> Any:
    """The torchao module (it also registers the quantised ops a saved program uses), or a
    ConfigError saying how to get it."""
    # torchao warns at import that its CUDA kernels do not load on a CPU-only machine; torch's
    # pytree warns about torchao's enums
    with quiet_loggers("torchao", "torch.utils._pytree"):
        try:
            import torchao
        except ImportError as exc:
            raise ConfigError("calibrated int8 on the pytorch backend needs torchao, which is "
                              "not installed", hint="pip install 'mlharness[torch]' (it brings "
                              "torchao)") from exc
    return torchao


@contextlib.contextmanager
def _quiet_export() -> Iterator[None]:
    """Advice that is not the user's: the quantiser notes the layers it leaves fp32 by design
    (e.g. a max-pool after an unquantised input), torch.export notes how it stores weights."""
    with warnings.catch_warnings(), quiet_loggers("torch.export"):
        warnings.filterwarnings("ignore", category=UserWarning, module=r"torchao\.")
        warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.export\.")
        yield


def require_pt2e(method: str) -> None:
    """Refuse a calibration method PT2E is not given here, before any data is read."""
    if method != "minmax":
        raise ConfigError(f"calibration method {method!r} is not offered for pytorch",
                          hint="PT2E takes min/max ranges here: drop --method, or use --backend "
                               "onnxruntime for entropy/percentile")
    import_torchao()


def export_dims(names: list[str] | tuple[str, ...], sequence_axis: bool
                ) -> tuple[dict[int, Any], ...]:
    """The dynamic axes of each input: the batch, and the sequence (axis 1) where the
    architecture has one (BERT)."""
    import torch

    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    if sequence_axis:
        sequence = torch.export.Dim("sequence", min=2, max=MAX_SEQUENCE)
        return tuple({0: batch, 1: sequence} for _ in names)
    return tuple({0: batch} for _ in names)


def _tensors(batch: dict[str, np.ndarray], names: list[str]) -> tuple[Any, ...]:
    import torch

    return tuple(torch.from_numpy(np.ascontiguousarray(batch[n])) for n in names)


def _example(batches: list[dict[str, np.ndarray]], names: list[str]) -> tuple[Any, ...]:
    """Two samples (torch.export takes an axis of size 1 for a constant)."""
    first = batches[0]
    pair = {n: np.concatenate([first[n], first[n]])[:2] for n in names}
    return _tensors(pair, names)


def _quantizer(net: Any, reduce_range: bool) -> tuple[Any, list[str]]:
    """The X86 inductor quantiser with min/max activation observers; the names of the Linear
    layers it leaves fp32."""
    import torch
    from torchao.quantization.pt2e.observer import MinMaxObserver
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq

    config = xiq.get_default_x86_inductor_quantization_config(reduce_range=reduce_range)
    minmax = MinMaxObserver.with_args(eps=2**-12)
    config = dataclasses.replace(config, **{
        side: dataclasses.replace(getattr(config, side), observer_or_fake_quant_ctr=minmax)
        for side in ("input_activation", "output_activation")})
    quantizer = xiq.X86InductorQuantizer().set_global(config)
    kept = [name for name, m in net.named_modules()
            if isinstance(m, torch.nn.Linear) and m.out_features < MIN_QUANTISED_OUTPUTS]
    for name in kept:
        quantizer.set_module_name_qconfig(name, None)
    return quantizer, kept


def quantize_pt2e(net: Any, arch: str, sequence_axis: bool, names: list[str], target: Path,
                  batches: list[dict[str, np.ndarray]], method: str = "minmax") -> dict:
    """Int8 program of the fp32 module ``net`` (architecture ``arch``, inputs ``names``, a
    dynamic sequence axis or not) into ``target`` (``.pt2``), activation ranges from
    ``batches``; returns what was done (for the calibration record)."""
    import torch

    require_pt2e(method)
    torchao = import_torchao()
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    reduce_range = matrix_isa()["int8"] not in ("amx", "avx512_vnni", "avx_vnni")
    dims = export_dims(names, sequence_axis)
    with quantised_file(Path(target), Path(target), "PT2E int8 quantisation",
                        "check the model runs in fp32 with --backend pytorch first",
                        suffix=PROGRAM_SUFFIX) as tmp, torch.no_grad(), _quiet_export():
        example = _example(batches, names)
        exported = torch.export.export(net, example, dynamic_shapes=dims)
        quantizer, kept = _quantizer(net, reduce_range)
        prepared = prepare_pt2e(exported.module(), quantizer)
        for batch in batches:
            prepared(*_tensors(batch, names))
        converted = _without_unused_tensors(convert_pt2e(prepared))
        program = torch.export.export(converted, example, dynamic_shapes=dims)
        torch.export.save(program, tmp)
    return {"recipe": RECIPE, "runtime": f"torch {torch.__version__}, torchao {torchao.__version__}",
            "model_format": "torch.export program (PT2E, X86InductorQuantizer), compiled at load",
            "weights": "int8 per channel, symmetric",
            "activations": "uint8 per tensor, affine" + (
                " (7 bits: reduce_range, this CPU has no VNNI)" if reduce_range else ""),
            "method": method, "kept_fp32": kept, "arch": arch, "inputs": names,
            "reduce_range": reduce_range}


def _without_unused_tensors(module: Any) -> Any:
    """``module`` without the fp32 weights its int8 constants replaced (the program would
    otherwise carry both: larger on disk than the checkpoint, and in memory)."""
    module.graph.eliminate_dead_code()
    used = {node.target for node in module.graph.nodes if node.op == "get_attr"}
    for name, _ in [*module.named_parameters(), *module.named_buffers()]:
        if name not in used:
            owner, _, leaf = name.rpartition(".")
            delattr(module.get_submodule(owner) if owner else module, leaf)
    module.recompile()
    return module


def load_program(model: Path) -> Any:
    """The module of a saved int8 program."""
    return load_exported(model).module()


def load_exported(model: Path) -> Any:
    """A saved int8 program (``torch.export.load``)."""
    import torch

    import_torchao()  # registers the quantised ops the program calls
    try:
        return torch.export.load(str(model))
    except Exception as exc:  # torch raises assorted types for foreign files
        raise ModelError(f"torch cannot load the program {model}: "
                         f"{one_line(exc, 200)}",
                         hint="pass the .pt2 file mlharness calibrate --backend pytorch wrote"
                         ) from None
