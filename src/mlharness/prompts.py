"""What an LLM task hands a text-generation backend: one prompt and how to sample its answer.

Task and backend meet here (as tensor tasks and backends meet in ``tensors.py``): the task never
knows which backend serves it, the backend never knows which benchmark it serves.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral
from typing import Any, Sequence

#: LoadGen logs every output token as an int32 (``mlperf_log_accuracy.json``, as every reference
#: SUT writes it): an id must lie in 0 .. 2^31 - 1 whatever the vocabulary
INT32_LIMIT = 2**31


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
    #: the chat template the reference client sends with ``messages`` (None: the server's own)
    chat_template: str | None = None
    #: send no sampling key (temperature, top-p, top-k, min tokens): the server's defaults, as
    #: a reference client that sends none (qwen3-vl's) gets them
    server_sampling: bool = False
    #: the audio to transcribe (a clip file's bytes), for speech-to-text servers
    audio: bytes | None = None
    #: the model's vocabulary size, from its tokenizer when the task has one (None: unknown,
    #: only the int32 range is checked): an answer's ids must lie below it
    vocab_size: int | None = None
    #: the tokenizer's end-of-sequence id when known: it may only be an answer's last token
    eos_token_id: int | None = None

    @property
    def id_limit(self) -> int:
        """Every output id must be below this: the vocabulary size, else int32's limit."""
        return min(self.vocab_size, INT32_LIMIT) if self.vocab_size else INT32_LIMIT

    def answer_problem(self, ids: Sequence[Any], tokenizer: bool = True) -> str | None:
        """Why ``ids`` cannot be this request's answer, or None: more tokens than
        ``max_new_tokens`` (a :class:`Generated` answer's own count where the server counted
        them), an id that is not an integer in int32's range and, with ``tokenizer``, an id
        beyond the vocabulary or an EOS token before the end. Linear in the answer's length."""
        count = generated_tokens(ids)
        if count > self.max_new_tokens:
            return f"{count} tokens for a request of at most {self.max_new_tokens}"
        known = tokenizer and self.vocab_size is not None
        bad = bad_token_id(ids, self.id_limit if known else INT32_LIMIT, known)
        if bad is not None:
            return bad
        if tokenizer and self.eos_token_id is not None:
            for at, token in enumerate(ids[:-1]):
                if token == self.eos_token_id:
                    return (f"the EOS token {self.eos_token_id} at position {at} of "
                            f"{len(ids)} is not the last")
        return None


class Generated(list[int]):
    """What a streaming backend generated for one request: its output token ids (the list
    itself, so whatever reads ids reads them), the text the server streamed for them (None:
    generation in process) and, where a server counts its tokens without returning their ids
    (a transcription server), that count. A task that logs text (qwen3-vl) or maps it to labels
    (whisper) reads ``text``; LoadGen's ``n_tokens`` is :attr:`n_tokens`."""

    def __init__(self, ids: Sequence[int] = (), text: str | None = None,
                 n_tokens: int | None = None) -> None:
        super().__init__(ids)
        self.text = text
        self._counted = n_tokens

    @property
    def n_tokens(self) -> int:
        """The tokens generated: the server's count where it gave one, else the ids'."""
        return self._counted if self._counted is not None else len(self)


def generated_tokens(ids: Sequence[Any]) -> int:
    """How many tokens an answer holds (:attr:`Generated.n_tokens`, or the ids')."""
    return ids.n_tokens if isinstance(ids, Generated) else len(ids)


def bad_token_id(ids: Sequence[Any], limit: int = INT32_LIMIT,
                 vocabulary: bool = False) -> str | None:
    """What is wrong with the first id of ``ids`` that is not an integer in 0 .. ``limit`` - 1
    (bools and floats are not integers), or None when all are."""
    for at, token in enumerate(ids):
        if type(token) is not int and (isinstance(token, bool)
                                       or not isinstance(token, Integral)):
            return f"token id {_shown(token)} at position {at} is not an integer"
        if not 0 <= int(token) < limit:
            where = (f"the vocabulary (0..{limit - 1})" if vocabulary and limit < INT32_LIMIT
                     else "int32 (0..2147483647)")
            return f"token id {_shown(token)} at position {at} is outside {where}"
    return None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
