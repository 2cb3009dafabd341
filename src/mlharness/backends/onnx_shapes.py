"""Read an ONNX model's declared input shapes, and the tables its integer inputs index, without
loading its weights.

A BERT-large ONNX file is 1.3 GB, almost all initializers; parsing it whole takes seconds. Only
``ModelProto.graph`` (field 7) and inside it ``GraphProto.input`` (field 11), ``node`` (1) and
the names and dims of ``initializer`` (5) are read here; every other field, and every tensor's
data, is skipped by seeking past it (protobuf wire format: varint keys, length-delimited
payloads).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

from mlharness.tensors import TensorSpec

_GRAPH_FIELD = 7
_NODE_FIELD = 1
_INITIALIZER_FIELD = 5
_INPUT_FIELD = 11
_TENSOR_DIMS_FIELD = 1
_TENSOR_NAME_FIELD = 8
#: ops that hand an index tensor on unchanged in value (to a Gather), or a table (from one)
_INDEX_PASSING = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity"}
_TABLE_PASSING = {"Cast", "Identity", "DequantizeLinear"}


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

    def read(fh: BinaryIO, field: int, size: int) -> None:
        if field != _INPUT_FIELD:
            fh.seek(size, 1)
            return
        info = ValueInfoProto.FromString(fh.read(size))
        tensor = info.type.tensor_type
        try:
            dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
        except (KeyError, ValueError):
            dtype = "unknown"
        dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim)
        shapes.append(TensorSpec(info.name, dtype, dims))

    return shapes if _read_graph(path, read) else None


def onnx_index_limits(path: Path) -> dict[str, int]:
    """``{graph input: rows}`` for each input that indexes a table of weights (a ``Gather`` of
    an initializer or a ``Constant``, such as BERT's ``input_ids`` into the word embeddings):
    its values must stay below ``rows``. Empty when the file cannot be read or no input indexes
    a table."""
    try:
        from onnx import NodeProto
    except ImportError:
        return {}
    inputs: list[str] = []
    nodes: list[Any] = []
    tables: dict[str, int] = {}  # initializer (or what passes it on) -> rows

    def read(fh: BinaryIO, field: int, size: int) -> None:
        if field == _NODE_FIELD:
            nodes.append(NodeProto.FromString(fh.read(size)))
        elif field == _INITIALIZER_FIELD:
            name, dims = _tensor_name_and_dims(fh, fh.tell() + size)
            if dims:
                tables[name] = dims[0]
        elif field == _INPUT_FIELD:
            end = fh.tell() + size
            inputs.append(_string_field(fh, end, 1))  # ValueInfoProto.name
            fh.seek(end)
        else:
            fh.seek(size, 1)

    if not _read_graph(path, read):
        return {}
    origin = {name: name for name in inputs}  # tensor -> the graph input its values are
    limits: dict[str, int] = {}
    for node in nodes:  # ONNX lists nodes in topological order
        first = node.input[0] if node.input else ""
        if node.op_type == "Constant":  # a table kept in the graph, not as an initializer
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None and value.dims:
                tables[node.output[0]] = value.dims[0]
        if node.op_type in _INDEX_PASSING and first in origin:
            origin.update({out: origin[first] for out in node.output})
        if node.op_type in _TABLE_PASSING and first in tables:
            tables.update({out: tables[first] for out in node.output})
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if node.op_type == "Gather" and axis == 0 and len(node.input) > 1 and \
                node.input[1] in origin and first in tables:
            name = origin[node.input[1]]
            limits[name] = min(limits.get(name, tables[first]), tables[first])
    return limits


def _read_graph(path: Path, read: Callable[[BinaryIO, int, int], None]) -> bool:
    """Call ``read(fh, field, size)`` for each length-delimited field of the model's graph,
    ``fh`` at the field's payload (``read`` must consume or skip exactly ``size`` bytes);
    False when the file cannot be read as ONNX."""
    try:
        with Path(path).open("rb") as fh:
            for field, wire in _fields(fh):
                if field != _GRAPH_FIELD or wire != 2:
                    _skip(fh, wire)
                    continue
                end = fh.tell() + (_varint(fh) or 0)
                for field, wire in _fields(fh, end):
                    if wire == 2:
                        read(fh, field, _varint(fh) or 0)
                    else:
                        _skip(fh, wire)
                return True
    except (OSError, ValueError):
        return False
    return False


def _fields(fh: BinaryIO, end: int | None = None) -> Iterator[tuple[int, int]]:
    """``(field number, wire type)`` of each field of the message that ends at ``end`` (None:
    the file's end), ``fh`` at the field's value, which the caller reads or ``_skip``s."""
    while end is None or fh.tell() < end:
        key = _varint(fh)
        if key is None:
            return
        yield key >> 3, key & 7


def _string(fh: BinaryIO) -> str:
    return fh.read(_varint(fh) or 0).decode("utf-8", "replace")


def _tensor_name_and_dims(fh: BinaryIO, end: int) -> tuple[str, list[int]]:
    """A TensorProto's name and dims, its data skipped; ``fh`` ends at ``end``."""
    name, dims = "", []
    for field, wire in _fields(fh, end):
        if field == _TENSOR_DIMS_FIELD and wire == 0:
            dims.append(_varint(fh) or 0)
        elif field == _TENSOR_DIMS_FIELD and wire == 2:  # packed
            stop = fh.tell() + (_varint(fh) or 0)
            while fh.tell() < stop:
                dims.append(_varint(fh) or 0)
        elif field == _TENSOR_NAME_FIELD and wire == 2:
            name = _string(fh)
        else:
            _skip(fh, wire)
    fh.seek(end)
    return name, dims


def _string_field(fh: BinaryIO, end: int, wanted: int) -> str:
    """The string field ``wanted`` of the message that ends at ``end`` ("" if absent)."""
    for field, wire in _fields(fh, end):
        if field == wanted and wire == 2:
            return _string(fh)
        _skip(fh, wire)
    return ""
