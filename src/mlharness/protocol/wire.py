"""The node's wire format, shared by the server (``serve/app.py``) and the client
(``distributed/remote.py``).

Requests that name samples carry their indices as little-endian int64 (``application/
octet-stream``). A ``/predict`` answer is ``n`` little-endian int64 lengths followed by the ``n``
response payloads back to back: the bytes LoadGen gets, unchanged (no JSON, no base64).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

CONTENT_TYPE = "application/octet-stream"
_INDEX = np.dtype("<i8")
INDEX_BYTES = _INDEX.itemsize  # one sample index on the wire


class WireError(ValueError):
    """A body that does not follow the format."""


def encode_indices(indices: Sequence[int]) -> bytes:
    return np.asarray(indices, dtype=_INDEX).tobytes()


def decode_indices(body: bytes, total: int) -> list[int]:
    """Indices from a request body; refuses empty, ragged or out-of-range bodies."""
    if not body or len(body) % _INDEX.itemsize:
        raise WireError(f"body of {len(body)} bytes is not a non-empty array of int64 indices")
    indices = np.frombuffer(body, dtype=_INDEX)
    low, high = int(indices.min()), int(indices.max())
    if low < 0 or high >= total:
        raise WireError(f"sample index out of range 0..{total - 1} (got {low}..{high})")
    return indices.tolist()


def encode_responses(payloads: Sequence[bytes]) -> bytes:
    lengths = np.fromiter((len(p) for p in payloads), dtype=_INDEX, count=len(payloads))
    return lengths.tobytes() + b"".join(payloads)


def decode_responses(body: bytes, count: int) -> list[bytes]:
    """``count`` payloads from a ``/predict`` answer."""
    head = count * _INDEX.itemsize
    if len(body) < head:
        raise WireError(f"answer of {len(body)} bytes is shorter than its {count} lengths")
    lengths = np.frombuffer(body, dtype=_INDEX, count=count).tolist()
    if head + sum(lengths) != len(body):
        raise WireError(f"answer of {len(body)} bytes does not match its lengths")
    out, offset = [], head
    for n in lengths:
        out.append(body[offset:offset + n])
        offset += n
    return out
