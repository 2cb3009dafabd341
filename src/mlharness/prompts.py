"""What an LLM task hands a text-generation backend: one prompt and how to sample its answer.

Task and backend meet here (as tensor tasks and backends meet in ``tensors.py``): the task never
knows which backend serves it, the backend never knows which benchmark it serves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt for a text-generation backend, with the benchmark's sampling settings (from the
    round's rules: ``rules/<round>.toml`` ``generation``). The backend never learns which
    benchmark it serves; it gets token ids and/or text and these numbers."""

    input_ids: tuple[int, ...] | None
    text: str | None
    max_new_tokens: int
    min_new_tokens: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 1  # 1: greedy; -1: no limit
    #: chat messages (``[{"role": ..., "content": ...}]``) for servers reached by chat; a
    #: content may be a list of parts (``{"type": "text", ...}``, ``{"type": "image_url", ...}``)
    messages: tuple[dict[str, Any], ...] | None = None
    #: send no sampling key (temperature, top-p, top-k, min tokens): the server's defaults, as
    #: a reference client that sends none (qwen3-vl's) gets them
    server_sampling: bool = False


class Generated(list[int]):
    """A request's output token ids, with the text the server streamed for them (None where the
    backend has none: generation in process). What a task that logs the answer's text reads
    (qwen3-vl: the reference logs the server's text, not token ids)."""

    def __init__(self, ids: Any = (), text: str | None = None) -> None:
        super().__init__(ids)
        self.text = text
