"""A vocab with more tokens than the model has word embeddings is refused before any sample
runs, on every backend and in ``calibrate``: onnxruntime would fail mid-run on the first token
past the table, OpenVINO would answer with zeros for it (a wrong F1, silently) and a compiled
pytorch model would abort the worker."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mlharness.backends.onnx_shapes import onnx_index_limits
from mlharness.cli.main import main
from synthetic_squad import bert_checkpoint, make_bert_onnx, make_squad, make_vocab, vocab_size

SMALL_TABLE = 60  # rows of the model's word embeddings: fewer than the vocab's tokens


@pytest.fixture(scope="module")
def mismatched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mismatch")
    squad = make_squad(root / "dev-v1.1.json", articles=1, seed=3)
    vocab = make_vocab(root / "vocab.txt", squad)
    assert vocab_size(vocab) > SMALL_TABLE
    model = make_bert_onnx(root / "bert.onnx", SMALL_TABLE, layers=1, hidden=32, heads=2,
                           intermediate=64)
    bert_checkpoint(model, root / "ckpt", 1, 32, 2, 64, SMALL_TABLE)
    return root


def data(root: Path, model: str) -> list[str]:
    return ["-b", "bert-99", "--model", str(root / model), "--dataset",
            str(root / "dev-v1.1.json"), "--vocab", str(root / "vocab.txt"), "--cache-dir",
            str(root / "cache")]


def test_onnx_tables_read_without_the_weights(mismatched: Path, tmp_path: Path) -> None:
    """The Gathers of initializers by graph inputs, found through the Cast/Reshape before them
    and the DequantizeLinear of a quantised table."""
    import onnx
    from onnx import helper, numpy_helper

    assert onnx_index_limits(mismatched / "bert.onnx") == {"input_ids": SMALL_TABLE,
                                                            "segment_ids": 2}
    graph = onnx.load(str(mismatched / "bert.onnx")).graph
    gather = next(n for n in graph.node if n.op_type == "Gather" and n.input[1] == "input_ids")
    cast = helper.make_node("Cast", ["input_ids"], ["ids32"], to=onnx.TensorProto.INT32)
    table = next(t for t in graph.initializer if t.name == gather.input[0])
    graph.initializer.extend([  # the table as a QDQ quantiser leaves it: int8 + scale
        numpy_helper.from_array(np.zeros(list(table.dims), np.int8), "table.q"),
        numpy_helper.from_array(np.array(0.1, np.float32), "table.scale")])
    dequantize = helper.make_node("DequantizeLinear", ["table.q", "table.scale"], ["table.dq"])
    gather.input[0], gather.input[1] = "table.dq", "ids32"
    graph.node.insert(0, cast)
    graph.node.insert(0, dequantize)
    onnx.save(onnx.ModelProto(graph=graph, opset_import=[helper.make_opsetid("", 17)],
                              ir_version=8), str(tmp_path / "cast.onnx"))
    assert onnx_index_limits(tmp_path / "cast.onnx")["input_ids"] == SMALL_TABLE
    # the segment table as a Constant node instead of an initializer
    segments = next(t for t in graph.initializer if t.name == "emb.type")
    graph.node.insert(0, helper.make_node("Constant", [], ["emb.type.c"], value=segments))
    next(n for n in graph.node if n.op_type == "Gather" and
         n.input[1] == "segment_ids").input[0] = "emb.type.c"
    graph.initializer.remove(segments)
    onnx.save(onnx.ModelProto(graph=graph, opset_import=[helper.make_opsetid("", 17)],
                              ir_version=8), str(tmp_path / "constant.onnx"))
    assert onnx_index_limits(tmp_path / "constant.onnx")["segment_ids"] == 2
    assert onnx_index_limits(tmp_path / "missing.onnx") == {}
    (tmp_path / "junk.onnx").write_bytes(b"\xff" * 64)
    assert onnx_index_limits(tmp_path / "junk.onnx") == {}


@pytest.mark.parametrize("backend, model, flags", [
    ("onnxruntime", "bert.onnx", []),
    ("onnxruntime", "bert.onnx", ["--precision", "int8"]),  # the quantised file is read
    ("openvino", "bert.onnx", []),
    ("pytorch", "ckpt/model.pytorch", [])])
def test_run_refuses_a_vocab_larger_than_the_model(mismatched: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture, backend: str,
                                                   model: str, flags: list[str]) -> None:
    pytest.importorskip({"openvino": "openvino", "pytorch": "torch"}.get(backend, "onnxruntime"))
    runs = tmp_path / "runs"
    code = main(["run", *data(mismatched, model), "--backend", backend, *flags, "--mode",
                 "accuracy", "--max-samples", "4", "--no-progress", "--output-dir", str(runs)])
    err = capsys.readouterr().err
    assert code == 2, err
    tokens = vocab_size(mismatched / "vocab.txt")
    assert f"input_ids up to {tokens - 1} (the {tokens} tokens of --vocab" in err
    assert f"a table of {SMALL_TABLE} rows" in err and "vocab.txt the model was trained" in err
    [run_dir] = (runs / "bert-99").iterdir()  # refused at load: nothing was run or scored
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "error" and record["error"]["type"] == "ModelError"
    assert not record.get("result") and not record.get("accuracy")


def test_calibrate_refuses_it_before_reading_the_data(mismatched: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    code = main(["calibrate", *data(mismatched, "bert.onnx")[:-1], str(tmp_path / "cache"),
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and f"a table of {SMALL_TABLE} rows" in err
    assert not (tmp_path / "cache").exists()  # refused before tokenising the dev set
