"""``mlharness calibrate -b whisper --backend hf``: the fp32 checkpoint transcribes the calibration
clips with the run's own greedy pass (``hf_whisper.py``) while min/max observers on the input of
every linear layer record the range it sees; ``hf_whisper_int8.py`` writes the int8 folder from
those ranges (and loads it for a run)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Sequence

import torch

from mlharness.backends import hf_whisper
from mlharness.backends.hf_whisper_folder import MARKER, require_minmax
from mlharness.backends.hf_whisper_int8 import INT8_WEIGHTS, RECIPE, write_folder
from mlharness.errors import ModelError
from mlharness.hostinfo import matrix_isa

#: clips transcribed at once while calibrating
CALIBRATION_BATCH = 8


def quantise(model: Path, target: Path, requests: Sequence[Any], method: str,
             task: Any = None) -> dict[str, Any]:
    """Transcribe ``requests`` (the calibration clips, as a run asks for them) with the fp32
    model, observing every linear layer's input range; write the int8 folder ``target``."""
    require_minmax(method)
    if not requests:
        raise ModelError("no calibration clips to transcribe", hint="check the calibration list")
    runner = hf_whisper.WhisperModel(Path(model), "fp32", None)
    net = runner.net
    ranges: dict[str, list[float]] = {}

    def observer(name: str) -> Any:
        def hook(_module: Any, args: tuple[torch.Tensor, ...]) -> None:
            x = args[0]
            low, high = float(x.min()), float(x.max())
            seen = ranges.setdefault(name, [low, high])
            seen[0], seen[1] = min(seen[0], low), max(seen[1], high)
        return hook

    linears = {name: m for name, m in net.named_modules() if isinstance(m, torch.nn.Linear)}
    handles = [m.register_forward_pre_hook(observer(name)) for name, m in linears.items()]
    never = threading.Event()
    try:
        for start in range(0, len(requests), CALIBRATION_BATCH):
            group = list(requests[start:start + CALIBRATION_BATCH])
            prompts = {tuple(r.input_ids or ()) for r in group}
            for prompt in prompts:
                same = [r for r in group if tuple(r.input_ids or ()) == prompt]
                runner.transcribe([r.audio for r in same], list(prompt),
                                  [r.max_new_tokens for r in same], lambda k, ids: None, never)
    finally:
        for handle in handles:
            handle.remove()
    unseen = sorted(set(linears) - set(ranges))
    if unseen:
        raise ModelError(f"calibration never reached {len(unseen)} linear layers "
                         f"({', '.join(unseen[:3])}…)", hint="check the model's configuration")
    reduce_range = matrix_isa()["int8"] not in ("amx", "avx512_vnni", "avx_vnni")
    levels = 127 if reduce_range else 255
    int8: dict[str, torch.Tensor] = {}
    layers: dict[str, dict[str, Any]] = {}
    for name, linear in linears.items():
        low, high = min(ranges[name][0], 0.0), max(ranges[name][1], 0.0)
        scale = max((high - low) / levels, 2**-20)
        zero = int(min(levels, max(0, round(-low / scale))))
        weight = linear.weight.detach().float()
        w_scale = (weight.abs().amax(dim=1) / 127).clamp(min=2**-20)
        int8[f"{name}.weight_int8"] = torch.round(weight / w_scale[:, None]).clamp(
            -127, 127).to(torch.int8).contiguous()
        int8[f"{name}.weight_scale"] = w_scale.contiguous()
        if linear.bias is not None:
            int8[f"{name}.bias"] = linear.bias.detach().float().clone().contiguous()
        layers[name] = {"input_min": low, "input_max": high, "input_scale": scale,
                        "input_zero_point": zero}
    quantised_params = {f"{name}.{p}" for name in linears for p in ("weight", "bias")}
    rest = {k: v.detach().clone().contiguous() for k, v in net.state_dict().items()
            if k not in quantised_params}
    write_folder(Path(model), Path(target), int8, rest, {
        "format": "mlharness-whisper-int8/1", "recipe": RECIPE, "reduce_range": reduce_range,
        "layers": layers})
    return {"recipe": RECIPE, "runtime": f"torch {torch.__version__} (fbgemm)",
            "model_format": "Hugging Face Whisper folder + int8 linear layers "
                            f"({INT8_WEIGHTS}, {MARKER})",
            "weights": "int8 per channel, symmetric",
            "activations": "uint8 per tensor, affine, static (calibrated)" + (
                " (7 bits: reduce_range, this CPU has no VNNI)" if reduce_range else ""),
            "method": method, "kept_fp32": [], "quantised_layers": len(linears),
            "clips": len(requests), "reduce_range": reduce_range}
