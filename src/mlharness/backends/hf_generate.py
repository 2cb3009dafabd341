"""What the hf backend does with ``torch`` and ``transformers``: open a model directory and
generate one request (batch 1), calling back at the first token. Imported only when a model is
loaded, so naming the backend (its options, whether it generates text) costs no torch import."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
from transformers.generation.stopping_criteria import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from mlharness.backends.base import GenerationRequest, OnFirst
from mlharness.errors import one_line


class _FirstToken(BaseStreamer):
    """Calls ``on_first`` at the first generated token (``generate`` first puts the prompt)."""

    def __init__(self, on_first: OnFirst) -> None:
        self.on_first, self.puts = on_first, 0

    def put(self, value: torch.Tensor) -> None:
        self.puts += 1
        if self.puts == 2:
            self.on_first([int(t) for t in value.reshape(-1).tolist()])

    def end(self) -> None:
        pass


class _Closed(StoppingCriteria):
    """Stops a generation in flight once the backend is closing."""

    def __init__(self, closing: threading.Event) -> None:
        self.closing = closing

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor,
                 **kwargs: Any) -> torch.Tensor:
        return torch.full((input_ids.shape[0],), self.closing.is_set(), dtype=torch.bool)


def versions() -> dict[str, str]:
    return {"transformers": transformers.__version__, "torch": torch.__version__}


def threads() -> int:
    return torch.get_num_threads()


def load_model(directory: Path, dtype: str, threads: int | None) -> Any:
    """The causal LM in ``directory`` (weights as ``dtype``), in eval mode; the transformers
    error as it raised it."""
    if threads:
        torch.set_num_threads(int(threads))
    net = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True,
                                               dtype=getattr(torch, dtype))
    return net.eval()


def load_tokenizer(directory: Path) -> tuple[Any, str]:
    """The directory's tokenizer and "", or None and why there is none."""
    try:
        return AutoTokenizer.from_pretrained(directory, local_files_only=True), ""
    except Exception as exc:  # no tokenizer: requests must bring token ids
        return None, one_line(exc, 200)


def generate(model: Any, prompt_ids: list[int], request: GenerationRequest,
             eos_token_id: int | None, on_first: OnFirst, closing: threading.Event) -> list[int]:
    """The output ids of one request, with the request's sampling only (greedy at temperature
    0 or top_k 1); the model's generation config gives just its special tokens."""
    prompt = torch.tensor([prompt_ids], dtype=torch.long)
    greedy = request.temperature == 0 or request.top_k == 1
    sampling = {} if greedy else {
        "temperature": request.temperature, "top_p": request.top_p,
        "top_k": 0 if request.top_k < 0 else request.top_k}  # HF: top_k=0 is no limit
    own = model.generation_config
    eos = eos_token_id if eos_token_id is not None else own.eos_token_id
    pad = own.pad_token_id if own.pad_token_id is not None else (
        eos[0] if isinstance(eos, list) else eos)
    config = GenerationConfig(max_new_tokens=request.max_new_tokens,
                              min_new_tokens=request.min_new_tokens, do_sample=not greedy,
                              eos_token_id=eos, pad_token_id=pad,
                              bos_token_id=own.bos_token_id, **sampling)
    with torch.inference_mode():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt),
                             generation_config=config, use_model_defaults=False,
                             streamer=_FirstToken(on_first),
                             stopping_criteria=StoppingCriteriaList([_Closed(closing)]))
    return [int(t) for t in out[0, prompt.shape[1]:].tolist()]
