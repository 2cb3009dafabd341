"""What the hf backend does with a Whisper model (``torch`` and ``transformers``, imported only
with one): the model's feature extractor computes each clip's log-mel features, padded to 30 s
(as vLLM's whisper processor calls it), and a greedy decoder loop transcribes a batch of clips
in one pass: the encoder once, then one token per step for every clip still going, with the
key/value cache; a clip is done at the end-of-text token (kept in its ids, as vLLM keeps it) or
at its request's limit. Plain argmax: no suppressed tokens, no forced ids beyond the prompt (the
reference's SamplingParams are temperature 0, top_p 1). The first token of every clip is
reported after the first step."""

from __future__ import annotations

import io
import threading
import warnings
from pathlib import Path
from typing import Callable, Sequence

import torch
import transformers
from transformers import (EncoderDecoderCache, WhisperFeatureExtractor,
                          WhisperForConditionalGeneration)
from transformers.cache_utils import DynamicCache

from mlharness.backends import hf_whisper_int8
from mlharness.backends.hf_whisper_folder import is_int8_folder
from mlharness.speech import audio as speech_audio

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "int8": torch.float32}


def versions() -> dict[str, str]:
    return {"transformers": transformers.__version__, "torch": torch.__version__}


class WhisperModel:
    """A loaded Whisper checkpoint with its feature extractor."""

    def __init__(self, directory: Path, precision: str, threads: int | None) -> None:
        if threads:
            torch.set_num_threads(int(threads))
        self.precision = precision
        self.dtype = DTYPES[precision]
        self.calibrated = is_int8_folder(directory)
        if self.calibrated:  # calibrated int8: static activation scales (calibrate writes it)
            net = hf_whisper_int8.load(directory)
        else:
            net = WhisperForConditionalGeneration.from_pretrained(
                directory, local_files_only=True, dtype=self.dtype).eval()
            if precision == "int8":
                net = _dynamic_int8(net)
        self.net = net
        self.features = WhisperFeatureExtractor.from_pretrained(directory, local_files_only=True)
        config = net.config
        self.eos = int(config.eos_token_id)
        self.config = config

    def log_mel(self, clips: Sequence[bytes]) -> torch.Tensor:
        """The batch's log-mel features ``(clips, mels, 3000)``: each clip decoded at 16 kHz and
        padded to 30 s by the feature extractor."""
        waves = [speech_audio.decode(io.BytesIO(data)) for data in clips]
        found = self.features(waves, sampling_rate=speech_audio.SAMPLE_RATE,
                              return_tensors="pt")
        return found.input_features.to(self.dtype)

    @torch.inference_mode()
    def transcribe(self, clips: Sequence[bytes], prompt: Sequence[int], max_new: Sequence[int],
                   on_first: Callable[[int, list[int]], None],
                   closing: threading.Event) -> list[list[int]]:
        """Greedy output ids of each clip (its end-of-text token included when reached);
        ``on_first(k, ids)`` after the first step."""
        n = len(clips)
        encoded = self.net.model.encoder(self.log_mel(clips)).last_hidden_state
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        step_ids = torch.tensor([list(prompt)] * n, dtype=torch.long)
        outputs: list[list[int]] = [[] for _ in range(n)]
        alive = list(range(n))  # the clips still in the batch, by position in it
        limit = max(max_new)
        for step in range(limit):
            if closing.is_set():
                break
            out = self.net(encoder_outputs=(encoded,), decoder_input_ids=step_ids,
                           past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            chosen = out.logits[:, -1, :].argmax(dim=-1).tolist()
            keep: list[int] = []
            for row, (k, token) in enumerate(zip(alive, chosen)):
                outputs[k].append(int(token))
                if step == 0:
                    on_first(k, [int(token)])
                if token != self.eos and len(outputs[k]) < max_new[k]:
                    keep.append(row)
            if not keep:
                break
            if len(keep) < len(alive):  # drop the finished clips from the batch
                index = torch.tensor(keep, dtype=torch.long)
                cache.batch_select_indices(index)
                encoded = encoded.index_select(0, index)
                chosen = [chosen[r] for r in keep]
                alive = [alive[r] for r in keep]
            step_ids = torch.tensor(chosen, dtype=torch.long).unsqueeze(1)
        return outputs


def _dynamic_int8(net: WhisperForConditionalGeneration) -> WhisperForConditionalGeneration:
    """Every linear layer quantised dynamically: int8 weights per output channel, int8
    activations ranged per call (as the pytorch backend quantises BERT)."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    # torch 2.13 still has torch.ao quantisation but calls it deprecated (torchao is its
    # successor): the pinned version is what runs, so its warnings are not the user's
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.ao.quantization is deprecated",
                                category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*quantize_per_.*deprecated",
                                category=UserWarning)
        return quantize_dynamic(net, {torch.nn.Linear: per_channel_dynamic_qconfig},
                                dtype=torch.qint8)
