"""What a model input is, in words both tasks and backends use (neither imports the other)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class TensorSpec:
    """A named tensor: dtype as a numpy name, shape with ``None`` for free dimensions."""

    name: str
    dtype: str
    shape: tuple[int | None, ...]


@dataclass(frozen=True)
class IndexRange:
    """The values a task feeds an integer input that a model uses as row indices into a table
    (BERT's token ids into its word embeddings)."""

    values: int  # what is fed lies in 0 .. values - 1
    source: str  # where the values come from, in words
    hint: str  # what to do when the model's table has fewer rows


#: one call of a runtime backend: named input arrays in, named output arrays out (the
#: inference seam of a tensor task calls it as often as its samples need)
Predict = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
