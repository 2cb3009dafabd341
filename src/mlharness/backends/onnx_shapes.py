"""Read an ONNX model's declared input shapes without loading its weights.

A BERT-large ONNX file is 1.3 GB, almost all initializers; parsing it whole takes seconds. Only
``ModelProto.graph`` (field 7) and inside it ``GraphProto.input`` (field 11) are read here; every
other field is skipped by seeking past it (protobuf wire format: varint keys, length-delimited
payloads).
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

from mlharness.tensors import TensorSpec

_GRAPH_FIELD = 7
_INPUT_FIELD = 11


def _varint(fh: BinaryIO) -> int | None:
    shift = result = 0
    while True:
        b = fh.read(1)
        if not b:
            return None
        result |= (b[0] & 0x7F) << shift
        if b[0] < 0x80:
            return result
        shift += 7


def _skip(fh: BinaryIO, wire: int) -> None:
    if wire == 0:
        _varint(fh)
    elif wire == 1:
        fh.seek(8, 1)
    elif wire == 2:
        fh.seek(_varint(fh) or 0, 1)
    elif wire == 5:
        fh.seek(4, 1)
    else:
        raise ValueError(f"unsupported wire type {wire}")


def onnx_input_shapes(path: Path) -> dict[str, list[int | None]] | None:
    """``{input name: dims}`` (None for symbolic dims), or None if the file cannot be read."""
    inputs = onnx_declared_inputs(path)
    return None if inputs is None else {t.name: list(t.shape) for t in inputs}


def onnx_declared_inputs(path: Path) -> list[TensorSpec] | None:
    """The inputs an ONNX file declares (None for symbolic dims), or None if it cannot be read."""
    try:
        from onnx import ValueInfoProto, helper
    except ImportError:
        return None
    shapes: list[TensorSpec] = []
    try:
        with Path(path).open("rb") as fh:
            while (key := _varint(fh)) is not None:
                field, wire = key >> 3, key & 7
                if field != _GRAPH_FIELD or wire != 2:
                    _skip(fh, wire)
                    continue
                end = fh.tell() + (_varint(fh) or 0)
                while fh.tell() < end:
                    key = _varint(fh)
                    if key is None:
                        break
                    if key >> 3 == _INPUT_FIELD and key & 7 == 2:
                        info = ValueInfoProto.FromString(fh.read(_varint(fh) or 0))
                        tensor = info.type.tensor_type
                        try:
                            dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
                        except (KeyError, ValueError):
                            dtype = "unknown"
                        dims = tuple(d.dim_value if d.HasField("dim_value") else None
                                     for d in tensor.shape.dim)
                        shapes.append(TensorSpec(info.name, dtype, dims))
                    else:
                        _skip(fh, key & 7)
                return shapes
    except (OSError, ValueError):
        return None
    return None
