"""The end-of-sequence token id and the vocabulary size of a Hugging Face tokenizer directory,
read from its files.

TEST06 counts the EOS tokens an output ends in; the id is the tokenizer's ``eos_token``
(``tokenizer_config.json``, a string or ``{"content": ...}``), looked up in that file's
``added_tokens_decoder``, then in ``tokenizer.json`` (``added_tokens``, ``model.vocab``), then
``vocab.json`` / ``vocab.txt``. Nothing is imported or downloaded: Llama 3.1 Instruct gives
128009 (``<|eot_id|>``), Llama 2 2 (``</s>``), DeepSeek-R1 1.

The vocabulary size bounds the ids an LLM server may answer with: one more than the largest id
of the tokenizer's vocabulary and added tokens (``tokenizer.json``, ``vocab.json``,
``vocab.txt``, ``added_tokens.json``, ``tokenizer_config.json``); a SentencePiece-only directory
(``tokenizer.model``) gives None (unknown).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlharness.errors import ConfigError


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read {path} ({exc})",
                          "give the model's Hugging Face tokenizer directory") from exc
    return data if isinstance(data, dict) else {}


def _content(token: Any) -> str | None:
    if isinstance(token, dict):
        token = token.get("content")
    return token if isinstance(token, str) else None


def eos_token(directory: Path) -> str | None:
    """The EOS token's text (None: the tokenizer names none)."""
    config = Path(directory) / "tokenizer_config.json"
    return _content(_json(config).get("eos_token")) if config.is_file() else None


def eos_token_id(directory: Path) -> int | None:
    """The EOS token's id, or None when the tokenizer names no EOS token."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ConfigError(f"tokenizer directory {directory} not found",
                          "give --task-option tokenizer=DIR or --eos-token-id N")
    token = eos_token(directory)
    if token is None:
        return None
    config = _json(directory / "tokenizer_config.json")
    for key, added in (config.get("added_tokens_decoder") or {}).items():
        if _content(added) == token:
            return int(key)
    if (directory / "tokenizer.json").is_file():
        fast = _json(directory / "tokenizer.json")
        for added in fast.get("added_tokens") or []:
            if isinstance(added, dict) and added.get("content") == token:
                return int(added["id"])
        vocab = (fast.get("model") or {}).get("vocab")
        if isinstance(vocab, dict) and token in vocab:
            return int(vocab[token])
    if (directory / "vocab.json").is_file():
        vocab = _json(directory / "vocab.json")
        if token in vocab:
            return int(vocab[token])
    if (directory / "vocab.txt").is_file():
        words = (directory / "vocab.txt").read_text(encoding="utf-8").splitlines()
        if token in words:
            return words.index(token)
    raise ConfigError(f"{directory}: the EOS token {token!r} is in none of the tokenizer's "
                      "vocabularies", "give the EOS id with --eos-token-id N")


def vocab_size(directory: Path) -> int | None:
    """One more than the largest token id the tokenizer in ``directory`` knows, or None when its
    files hold no vocabulary this module reads (a SentencePiece ``tokenizer.model`` only)."""
    directory = Path(directory)
    ids: list[int] = []
    if (directory / "tokenizer.json").is_file():
        fast = _json(directory / "tokenizer.json")
        vocab = (fast.get("model") or {}).get("vocab")
        if isinstance(vocab, dict):
            ids += [v for v in vocab.values() if type(v) is int]
        elif isinstance(vocab, list):  # Unigram: [piece, score] in id order
            ids.append(len(vocab) - 1)
        ids += [a["id"] for a in fast.get("added_tokens") or []
                if isinstance(a, dict) and type(a.get("id")) is int]
    for name in ("vocab.json", "added_tokens.json"):
        if (directory / name).is_file():
            ids += [v for v in _json(directory / name).values() if type(v) is int]
    if (directory / "vocab.txt").is_file():
        words = (directory / "vocab.txt").read_text(encoding="utf-8").splitlines()
        ids.append(len(words) - 1)
    config = directory / "tokenizer_config.json"
    if config.is_file():
        ids += [int(k) for k in (_json(config).get("added_tokens_decoder") or {})
                if str(k).isascii() and str(k).isdigit()]
    return max(ids) + 1 if ids else None
