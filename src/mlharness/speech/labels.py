"""The character labels of whisper's LoadGen response (``speech2text/accuracy_eval.py`` and
``reference_SUT.py`` list them): the response of a sample is an int64 array of indices into
:data:`LABELS`, one per kept character of the transcript."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from mlharness.errors import DatasetError

#: space, a-z, apostrophe, digits, then $ % + - (accuracy_eval.py ``labels``, in its order)
LABELS: tuple[str, ...] = (" ", *"abcdefghijklmnopqrstuvwxyz", "'", *"0123456789", "$", "%",
                           "+", "-")
INDEX = {char: i for i, char in enumerate(LABELS)}
#: the response's element type (accuracy_eval.py's default ``--output_dtype int64``)
RESPONSE_DTYPE = "int64"


def transcript_indices(text: str) -> list[int]:
    """A generated transcript as the reference SUT encodes it: lower-cased, stripped, each
    character that is a label kept as its index, every other character dropped."""
    return [INDEX[c] for c in text.lower().strip() if c in INDEX]


def reference_indices(transcript: str) -> list[int]:
    """A manifest transcript as ``manifest.py`` parses it: each character that is a label as its
    index, the others dropped (no case folding: the manifests hold lower-case text)."""
    return [INDEX[c] for c in transcript if c in INDEX]


def encode(text: str) -> bytes:
    """The LoadGen response bytes of a generated transcript."""
    return np.asarray(transcript_indices(text), dtype=np.int64).tobytes()


def decode(indices: Sequence[int]) -> str:
    """The characters of label indices (an index outside the labels: DatasetError)."""
    bad = [int(i) for i in indices if not 0 <= int(i) < len(LABELS)]
    if bad:
        raise DatasetError(f"label index {bad[0]} is outside whisper's {len(LABELS)} labels",
                           "is this a whisper accuracy log (int64 label indices)?")
    return "".join(LABELS[int(i)] for i in indices)


def decode_response(data: bytes, dtype: str = RESPONSE_DTYPE) -> str:
    """The text of one accuracy-log response (``dtype``: its element type)."""
    width = np.dtype(dtype).itemsize
    if len(data) % width:
        raise DatasetError(f"a response of {len(data)} bytes is not a whole number of {dtype}",
                           "is this a whisper accuracy log (int64 label indices)?")
    return decode(np.frombuffer(data, dtype=dtype).tolist())
