"""The model architectures the ``pytorch`` backend builds around a state dict, as a registry.

An official PyTorch checkpoint is a state dict with no graph, so the backend must know the
architecture: how to tell it from the keys, the module that holds the weights, its inputs and
outputs, and what it allows (dynamic int8, channels-last, a dynamic sequence axis). Each is one
:class:`TorchArch` entry in :data:`ARCHS`; a new architecture is an entry here (and its module
in ``torch_models.py``), not a branch in the backend. Nothing here imports torch until a model is
built or run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from mlharness.errors import ModelError
from mlharness.tensors import TensorSpec

BERT_INPUTS = ("input_ids", "input_mask", "segment_ids")
BERT_OUTPUTS = ("output_start_logits", "output_end_logits")
#: the image input's name when the task names none (the official ResNet50 ONNX's)
IMAGE_INPUT = "input_tensor:0"


@dataclass(frozen=True)
class TorchArch:
    """One architecture the pytorch backend runs."""

    name: str
    #: whether a state dict's keys are this architecture's
    detect: Callable[[dict[str, Any]], bool]
    #: the model's inputs, given the names the task feeds (empty: none given)
    inputs: Callable[[list[TensorSpec]], list[TensorSpec]]
    #: the module holding ``state``'s weights; ``config``: the architecture's config file's
    #: contents (BERT's bert_config.json), when it has one
    build: Callable[[dict[str, Any], dict[str, Any] | None], Any]
    #: the model's outputs as the task reads them, from what the module returned
    outputs: Callable[[Any], dict[str, np.ndarray]]
    #: a dummy batch of ``batch`` samples (warming up, exporting)
    sample: Callable[[list[TensorSpec], int], dict[str, np.ndarray]]
    #: reads a config file beside the checkpoint (``config_file``), e.g. bert_config.json
    config_file: str | None = None
    #: its inputs have a dynamic sequence axis (axis 1) besides the batch
    sequence_axis: bool = False
    #: runs channels-last (oneDNN's fast layout for convolutions)
    channels_last: bool = False
    #: ``--precision int8`` of a checkpoint may quantise it dynamically (Linear layers); else
    #: int8 needs a calibrated program
    dynamic_int8: bool = False

    def tensors(self, inputs: dict[str, np.ndarray], specs: list[TensorSpec]) -> tuple[Any, ...]:
        """The module's arguments, in the order of ``specs`` (channels-last where it runs so)."""
        import torch

        out = tuple(torch.from_numpy(inputs[s.name]) for s in specs)
        if self.channels_last:
            return tuple(t.contiguous(memory_format=torch.channels_last) for t in out)
        return out


def _bert_module(state: dict[str, Any], config: dict[str, Any] | None) -> Any:
    # lazy: torch_models imports torch, which the backend loads only with a model
    from mlharness.backends.torch_models import BertForQA

    return BertForQA(config or {})


def _bert_outputs(result: Any) -> dict[str, np.ndarray]:
    start, end = result
    return {BERT_OUTPUTS[0]: start.float().numpy(), BERT_OUTPUTS[1]: end.float().numpy()}


def _resnet_module(state: dict[str, Any], config: dict[str, Any] | None) -> Any:
    # lazy: torch_models imports torch, which the backend loads only with a model
    from mlharness.backends.torch_models import resnet_from_state

    return resnet_from_state(state)


def _classifier_outputs(result: Any) -> dict[str, np.ndarray]:
    import torch

    logits = result.float()
    return {"ArgMax:0": logits.argmax(1).numpy(),
            "softmax_tensor:0": torch.softmax(logits, 1).numpy()}


def _image_inputs(task_inputs: list[TensorSpec]) -> list[TensorSpec]:
    name = task_inputs[0].name if task_inputs else IMAGE_INPUT
    return [TensorSpec(name, "float32", (None, 3, None, None))]


#: the architectures, by the name ``--backend-option arch=`` takes
ARCHS: dict[str, TorchArch] = {
    "bert": TorchArch(
        name="bert",
        detect=lambda state: any(k.startswith("bert.") for k in state),
        inputs=lambda task_inputs: [TensorSpec(n, "int64", (None, None)) for n in BERT_INPUTS],
        build=_bert_module, outputs=_bert_outputs,
        sample=lambda specs, batch: {s.name: np.ones((batch, 128), np.int64) for s in specs},
        config_file="bert_config.json", sequence_axis=True, dynamic_int8=True),
    "resnet50": TorchArch(
        name="resnet50",
        detect=lambda state: "fc.weight" in state,
        inputs=_image_inputs, build=_resnet_module, outputs=_classifier_outputs,
        sample=lambda specs, batch: {s.name: np.zeros((batch, 3, 224, 224), np.float32)
                                     for s in specs},
        channels_last=True),
}


def arch_named(name: str, where: str) -> TorchArch:
    """The architecture ``name``; ModelError naming ``where`` it came from when unknown."""
    arch = ARCHS.get(name)
    if arch is None:
        raise ModelError(f"cannot tell the architecture of {where}",
                         hint="pass --backend-option arch=" + " or arch=".join(ARCHS))
    return arch


def detect(state: dict[str, Any], model: str) -> TorchArch:
    """The architecture whose keys ``state`` has (the first that claims it)."""
    for arch in ARCHS.values():
        if arch.detect(state):
            return arch
    return arch_named("", f"{model} from its keys")
