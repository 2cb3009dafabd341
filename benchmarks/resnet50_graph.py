"""A ResNet50 v1.5-shaped ONNX graph with random weights, built with onnx.helper.

Same layer structure and tensor shapes as the official ``resnet50_v1.onnx`` (stem 7x7/2 conv +
3x3/2 max-pool; bottleneck stages of 3, 4, 6, 3 blocks with widths 64..512 x4, the stride on the
3x3 conv as in v1.5; global average pool; 1001-way FC with a background class; softmax; ArgMax),
with batch-norm folded into the convolutions, as an inference export would have it. Input
``input_tensor:0`` float32 [N, 3, 224, 224]; outputs ``ArgMax:0`` int64 [N] and
``softmax_tensor:0`` float32 [N, 1001]. ~25.6 M parameters (~100 MB).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, stride)
#: multiply-adds of one 224x224 image through ResNet-50 v1.5
MACS = 4.09e9


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def name(self, kind: str) -> str:
        self.n += 1
        return f"{kind}_{self.n}"

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, relu: bool = True,
             gain: float = 1.0) -> str:
        w = self.name("w")
        b = self.name("b")
        std = gain * np.sqrt(2.0 / (cin * k * k))  # He init keeps activations O(1)
        self.inits.append(numpy_helper.from_array(
            (self.rng.standard_normal((cout, cin, k, k)) * std).astype(np.float32), w))
        self.inits.append(numpy_helper.from_array(np.zeros(cout, np.float32), b))
        y = self.name("conv")
        self.nodes.append(helper.make_node("Conv", [x, w, b], [y], kernel_shape=[k, k],
                                           strides=[stride, stride], pads=[k // 2] * 4))
        if not relu:
            return y
        r = self.name("relu")
        self.nodes.append(helper.make_node("Relu", [y], [r]))
        return r

    def bottleneck(self, x: str, cin: int, width: int, stride: int) -> str:
        cout = width * 4
        y = self.conv(x, cin, width, 1)
        y = self.conv(y, width, width, 3, stride)  # v1.5: stride on the 3x3
        y = self.conv(y, width, cout, 1, relu=False, gain=0.2)
        short = x if (stride == 1 and cin == cout) else self.conv(x, cin, cout, 1, stride,
                                                                  relu=False)
        s = self.name("add")
        self.nodes.append(helper.make_node("Add", [y, short], [s]))
        r = self.name("relu")
        self.nodes.append(helper.make_node("Relu", [s], [r]))
        return r


def build_resnet50(path: Path, seed: int = 0) -> Path:
    """Write the model to ``path`` (skipped if it exists) and return the path."""
    if path.is_file():
        return path
    b = _Builder(seed)
    x = b.conv("input_tensor:0", 3, 64, 7, 2)
    b.nodes.append(helper.make_node("MaxPool", [x], ["pool0"], kernel_shape=[3, 3],
                                    strides=[2, 2], pads=[1, 1, 1, 1]))
    x, cin = "pool0", 64
    for width, blocks, stride in STAGES:
        for i in range(blocks):
            x = b.bottleneck(x, cin, width, stride if i == 0 else 1)
            cin = width * 4
    b.inits.append(numpy_helper.from_array(
        (b.rng.standard_normal((cin, 1001)) / np.sqrt(cin)).astype(np.float32), "fc_w"))
    b.inits.append(numpy_helper.from_array(np.zeros(1001, np.float32), "fc_b"))
    b.nodes += [
        helper.make_node("GlobalAveragePool", [x], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["softmax_tensor:0"], axis=1),
        helper.make_node("ArgMax", ["softmax_tensor:0"], ["ArgMax:0"], axis=1, keepdims=0),
    ]
    graph = helper.make_graph(
        b.nodes, "resnet50_v1.5_random",
        [helper.make_tensor_value_info("input_tensor:0", TensorProto.FLOAT, ["N", 3, 224, 224])],
        [helper.make_tensor_value_info("ArgMax:0", TensorProto.INT64, ["N"]),
         helper.make_tensor_value_info("softmax_tensor:0", TensorProto.FLOAT, ["N", 1001])],
        initializer=b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path
