"""LoadGen's ``mlperf_log_accuracy.json`` for token outputs, read as typed entries.

With ``use_token_latencies`` LoadGen logs each response as ``seq_id``, ``qsl_idx``, ``data``
(the output token ids, hex of the SUT's bytes), ``token_count`` (the ``n_tokens`` the SUT
reported) and, when the first token was reported apart (``FirstTokenComplete``), ``token_data``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from mlharness.errors import DatasetError

TokenDtype = Literal["int64", "int32", "int16", "float32"]


class TokenEntry(BaseModel):
    """One logged response."""

    model_config = ConfigDict(extra="allow", frozen=True)

    seq_id: int
    qsl_idx: int
    data: str
    token_count: int | None = None
    token_data: str | None = None

    def tokens(self, dtype: TokenDtype = "int32") -> np.ndarray:
        """The output token ids (``data``) as ``dtype``."""
        return _decode(self.data, dtype, self.qsl_idx, "data")

    def first_tokens(self, dtype: TokenDtype = "int32") -> np.ndarray | None:
        """The separately reported first token(s) (``token_data``), if logged."""
        if self.token_data is None:
            return None
        return _decode(self.token_data, dtype, self.qsl_idx, "token_data")


def _decode(hex_text: str, dtype: str, qsl_idx: int, key: str) -> np.ndarray:
    try:
        return np.frombuffer(bytes.fromhex(hex_text), dtype=np.dtype(dtype))
    except ValueError as exc:
        raise DatasetError(f"accuracy log entry qsl_idx={qsl_idx}: {key} is not {dtype} hex "
                           f"({exc})", "pass the dtype the SUT wrote (int32 or int64)") from exc


def read_entries(path: Path) -> list[TokenEntry]:
    """Every entry of an accuracy log, in file order."""
    try:
        raw = json.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise DatasetError(f"accuracy log {path} not found",
                           "pass the run's mlperf_log_accuracy.json") from exc
    except json.JSONDecodeError as exc:
        raise DatasetError(f"accuracy log {path} is not JSON ({exc.msg}, line {exc.lineno})",
                           "a truncated log (hash= line) cannot be scored") from exc
    if not isinstance(raw, list):
        raise DatasetError(f"accuracy log {path} is not a JSON list",
                           "LoadGen writes a list of {seq_id, qsl_idx, data} objects")
    try:
        return [TokenEntry.model_validate(e) for e in raw]
    except ValidationError as exc:
        raise DatasetError(f"accuracy log {path}: {' '.join(str(exc).split())[:200]}",
                           "is this LoadGen's mlperf_log_accuracy.json?") from exc


def first_per_sample(entries: list[TokenEntry]) -> list[TokenEntry]:
    """The first entry of each ``qsl_idx``, in file order (how the official scripts dedupe)."""
    seen: set[int] = set()
    out = []
    for e in entries:
        if e.qsl_idx not in seen:
            seen.add(e.qsl_idx)
            out.append(e)
    return out
