"""Calibrated (static) int8 Whisper for the hf backend (``torch``, imported only with a model).

``mlharness calibrate -b whisper --backend hf`` loads the fp32 checkpoint, transcribes the
calibration clips with the run's own greedy pass (``hf_whisper.py``: encoder once, decoder step
by step with the key/value cache) while min/max observers on the input of every linear layer
(encoder, decoder, cross-attention and the vocabulary projection ``proj_out``) record the range
it sees, and writes ``<model>.int8/``: the int8 weights (per output channel, symmetric), each
layer's fixed activation scale and zero point (uint8 per tensor, affine), the rest of the
weights in fp32, and the model's configuration, feature extractor and tokenizer files.

A run loads that folder into :class:`StaticInt8Linear` layers: fbgemm's int8 GEMM
(``quantized::linear_with_input_q_dq_qweight_dq_output_fp32``) quantises each input with the
calibrated scale (no range is measured per call, unlike the dynamic path), multiplies in int8
and returns fp32. Chosen by measurement on this 2-core Xeon (AMX, VNNI): as fast as the dynamic
kernel or faster on the encoder's large GEMMs, fp32's speed ~1.5-3x; oneDNN's
``qlinear_pointwise`` was slower here for the decoder's small batches (docs/whisper.md). On a
CPU without VNNI the activations keep 7 bits (``reduce_range``), as fbgemm needs there.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterator

import torch

from mlharness.backends.hf_whisper_folder import MARKER
from mlharness.errors import ModelError, one_line

#: bump when the recipe changes
RECIPE = "whisper-static-int8-fbgemm-v1-minmax"
INT8_WEIGHTS = "int8_linears.safetensors"
REST_WEIGHTS = "model.safetensors"
#: weight files of a Hugging Face folder, not copied into the int8 folder
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """torch 2.13 calls its quantised tensors deprecated: the pinned version is what runs."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*deprecated", category=UserWarning,
                                module=r"torch\.")
        warnings.filterwarnings("ignore", message=".*quantiz.*deprecated")
        yield


class StaticInt8Linear(torch.nn.Module):
    """A linear layer in int8 with a fixed (calibrated) input scale: fp32 in, fp32 out."""

    def __init__(self, weight_int8: torch.Tensor, weight_scale: torch.Tensor,
                 bias: torch.Tensor | None, input_scale: float, input_zero_point: int) -> None:
        super().__init__()
        self.in_features = int(weight_int8.shape[1])
        self.out_features = int(weight_int8.shape[0])
        self.input_scale = float(input_scale)
        self.input_zero_point = int(input_zero_point)
        with _quiet():
            qweight = torch._make_per_channel_quantized_tensor(
                weight_int8, weight_scale.double(),
                torch.zeros(self.out_features, dtype=torch.long), 0)
            self._packed = torch.ops.quantized.linear_prepack(qweight, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(
            x.contiguous(), self.input_scale, self.input_zero_point, self._packed)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"input_scale={self.input_scale:.6g}, zero_point={self.input_zero_point}")


def write_folder(model: Path, target: Path, int8: dict[str, torch.Tensor],
                  rest: dict[str, torch.Tensor], marker: dict[str, Any]) -> None:
    """The int8 folder, written beside ``target`` and moved onto it once complete."""
    from safetensors.torch import save_file

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.tmp"))
    try:
        for item in model.iterdir():  # configuration, feature extractor, tokenizer
            if item.is_file() and not item.name.endswith(_WEIGHT_SUFFIXES) \
                    and not item.name.endswith(".index.json"):
                shutil.copy2(item, tmp / item.name)
        save_file(int8, str(tmp / INT8_WEIGHTS), metadata={"format": "pt"})
        save_file(rest, str(tmp / REST_WEIGHTS), metadata={"format": "pt"})
        (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        tmp.chmod(0o755)
        if target.exists():  # calibrate --force replaces a folder it wrote (checked before)
            shutil.rmtree(target)
        tmp.rename(target)
    except Exception as exc:  # noqa: BLE001 - one line for the user
        shutil.rmtree(tmp, ignore_errors=True)
        raise ModelError(f"writing the int8 model {target} failed: {one_line(exc)}",
                         hint="check the free space and permissions there") from exc


# ---- run ------------------------------------------------------------------------------------

def load(directory: Path) -> Any:
    """The calibrated int8 Whisper in ``directory``: the architecture from its configuration,
    the int8 layers from :data:`INT8_WEIGHTS`, the other weights from :data:`REST_WEIGHTS`."""
    from safetensors.torch import load_file
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    directory = Path(directory)
    marker = json.loads((directory / MARKER).read_text(encoding="utf-8"))
    layers: dict[str, dict[str, Any]] = marker["layers"]
    config = WhisperConfig.from_pretrained(directory, local_files_only=True)
    with torch.device("meta"):
        net = WhisperForConditionalGeneration(config)
    int8 = load_file(str(directory / INT8_WEIGHTS))
    for name, layer in layers.items():
        owner_name, _, leaf = name.rpartition(".")
        owner = net.get_submodule(owner_name) if owner_name else net
        setattr(owner, leaf, StaticInt8Linear(
            int8[f"{name}.weight_int8"], int8[f"{name}.weight_scale"], int8.get(f"{name}.bias"),
            layer["input_scale"], layer["input_zero_point"]))
    net.load_state_dict(load_file(str(directory / REST_WEIGHTS)), strict=False, assign=True)
    missing = [n for n, t in [*net.named_parameters(), *net.named_buffers()] if t.is_meta]
    if missing:
        raise ModelError(f"the int8 model {directory} lacks {len(missing)} weights "
                         f"({', '.join(missing[:3])}…)",
                         hint="calibrate it again: mlharness calibrate -b whisper --backend hf")
    return net.eval()
