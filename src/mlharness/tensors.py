"""What a model input is, in words both tasks and backends use (neither imports the other)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TensorSpec:
    """A named tensor: dtype as a numpy name, shape with ``None`` for free dimensions."""

    name: str
    dtype: str
    shape: tuple[int | None, ...]
