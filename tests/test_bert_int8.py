"""The int8 recipe: which MatMuls are quantised, on a tiny random BERT (seconds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlharness.backends.onnx_precision import prepared_model, small_output_nodes
from synthetic_squad import make_bert_onnx

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def test_int8_keeps_attention_and_head_fp32(tmp_path: Path) -> None:
    model = make_bert_onnx(tmp_path / "bert.onnx", vocab_size=200, layers=2)
    assert small_output_nodes(model) == ["qa.mm"]
    q = prepared_model(model, "int8", cache_dir=tmp_path / "cache")
    assert q != model and q.is_file()
    nodes = onnx.load(str(q)).graph.node
    fp32 = sorted(n.name for n in nodes if n.op_type == "MatMul")
    # activation x activation (QK^T, probs x V) and the 64 x 2 QA head stay fp32
    assert fp32 == ["l0.ctx", "l0.qk", "l1.ctx", "l1.qk", "qa.mm"]
    # the 6 weight MatMuls of each layer are quantised
    assert sum(n.op_type == "MatMulInteger" for n in nodes) == 12
    assert prepared_model(model, "int8", cache_dir=tmp_path / "cache") == q  # cached

    rng = np.random.default_rng(0)
    feed = {"input_ids": rng.integers(0, 200, (2, 40)), "input_mask": np.ones((2, 40), np.int64),
            "segment_ids": np.zeros((2, 40), np.int64)}
    ref = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feed)
    out = ort.InferenceSession(str(q), providers=["CPUExecutionProvider"]).run(None, feed)
    for a, b in zip(ref, out):
        assert a.shape == b.shape and np.abs(a - b).max() < 0.1 * a.std() + 1e-3
