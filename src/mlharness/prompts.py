"""What an LLM task hands a text-generation backend: one prompt and how to sample its answer.

Task and backend meet here (as tensor tasks and backends meet in ``tensors.py``): the task never
knows which backend serves it, the backend never knows which benchmark it serves.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt for a text-generation backend, with the benchmark's sampling settings (from the
    round's rules: ``rules/llm_<round>.toml`` ``generation``). The backend never learns which
    benchmark it serves; it gets token ids and/or text and these numbers."""

    input_ids: tuple[int, ...] | None
    text: str | None
    max_new_tokens: int
    min_new_tokens: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 1  # 1: greedy; -1: no limit
    #: chat messages (``[{"role": ..., "content": ...}]``) for servers reached by chat
    messages: tuple[dict[str, str], ...] | None = None
    #: speech to text: the clip's audio file (16 kHz WAV bytes), sent to a transcription server
    #: as is and decoded by an in-process model; ``input_ids`` / ``text`` are then the decoder's
    #: prompt
    audio: bytes | None = None


@dataclass(frozen=True)
class TextAnswer:
    """An answer given as text with the number of tokens generated, without the ids: what a
    transcription server returns (``on_done`` takes it in place of the ids; the task encodes
    the text, LoadGen's ``n_tokens`` is ``n_tokens``)."""

    text: str
    n_tokens: int
