"""Small TRAINED models with decisive outputs, for judging reduced precision (random weights give
near-tied logits, so agreement on them says little).

``make_trained_cnn``: a 3-conv CNN trained (torch, seconds) on a synthetic ImageNet-layout set of
10 classes (a colour and a stripe direction per class, with noise), pre-processed exactly as the
harness feeds ResNet50; exported with the official ResNet50 signature (``input_tensor:0`` ->
``ArgMax:0`` and ``softmax_tensor:0`` over 1001 classes, class 0 the background) and evaluated on
a held-out set whose file names start with the official calibration list's, so ``mlharness
calibrate`` finds official calibration samples in it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

CLASSES = 10
#: (R, G, B) base colour per class; stripes horizontal for even classes, vertical for odd
COLOURS = [(200, 40, 40), (40, 200, 40), (40, 40, 200), (200, 200, 40), (200, 40, 200),
           (40, 200, 200), (230, 130, 30), (130, 30, 230), (30, 230, 130), (120, 120, 120)]


def _image(rng: np.random.Generator, cls: int) -> np.ndarray:
    h, w = int(rng.integers(230, 320)), int(rng.integers(230, 320))
    base = np.array(COLOURS[cls], np.float32) * rng.uniform(0.6, 1.1)
    period = int(rng.integers(12, 30))
    axis = np.arange(h if cls % 2 == 0 else w)
    stripes = ((axis // (period // 2)) % 2).astype(np.float32) * 70.0 - 35.0
    stripes = stripes[:, None] if cls % 2 == 0 else stripes[None, :]
    img = base[None, None, :] + stripes[..., None] + rng.normal(0, 45, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def make_set(root: Path, count: int, seed: int, names: list[str] | None = None) -> list[int]:
    """``count`` JPEGs + ``val_map.txt``; the first len(names) files take those names."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    labels, lines = [], []
    for i in range(count):
        cls = i % CLASSES
        name = names[i] if names and i < len(names) else f"ILSVRC2012_val_{90000000 + i:08d}.JPEG"
        Image.fromarray(_image(rng, cls)).save(root / name, "JPEG", quality=90)
        labels.append(cls)
        lines.append(f"{name} {cls}\n")
    (root / "val_map.txt").write_text("".join(lines))
    return labels


def _arrays(root: Path) -> tuple[np.ndarray, np.ndarray]:
    from mlharness.tasks.vision.preprocessing import RESNET50, ImagePreprocessor

    prep = ImagePreprocessor(RESNET50)
    rows = [line.split() for line in (root / "val_map.txt").read_text().splitlines()]
    x = np.stack([prep(root / name) for name, _ in rows])
    return x, np.array([int(label) for _, label in rows])


#: (in, out, kernel, stride) of the three convolutions
CONVS = ((3, 8, 7, 4), (8, 16, 3, 2), (16, 32, 3, 2))


def train(x: np.ndarray, y: np.ndarray, epochs: int = 12, seed: int = 0) -> dict[str, np.ndarray]:
    import torch
    from torch import nn

    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for cin, cout, k, s in CONVS:
        layers += [nn.Conv2d(cin, cout, k, s, k // 2), nn.ReLU()]
    net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, CLASSES))
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    xt = torch.from_numpy(x / 64.0).float()  # the harness feeds mean-subtracted 0..255 pixels
    yt = torch.from_numpy(y)
    for _ in range(epochs):
        perm = torch.randperm(len(xt))
        for i in range(0, len(xt), 32):
            idx = perm[i:i + 32]
            loss = nn.functional.cross_entropy(net(xt[idx]), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    state = {k: v.detach().numpy() for k, v in net.state_dict().items()}
    # fold the 1/64 input scale into the first convolution's weights
    state["0.weight"] = state["0.weight"] / 64.0
    return state


def export_onnx(state: dict[str, np.ndarray], path: Path) -> Path:
    """The trained CNN as an ONNX model with the official ResNet50 signature (1001 classes)."""
    from onnx import TensorProto, helper, numpy_helper

    from synthetic_vision import save_model

    inits, nodes, x = [], [], "input_tensor:0"
    for i, (_, _, k, s) in enumerate(CONVS):
        w, b = state[f"{2 * i}.weight"], state[f"{2 * i}.bias"]
        inits += [numpy_helper.from_array(w.astype(np.float32), f"c{i}.w"),
                  numpy_helper.from_array(b.astype(np.float32), f"c{i}.b")]
        nodes += [helper.make_node("Conv", [x, f"c{i}.w", f"c{i}.b"], [f"c{i}"], name=f"conv{i}",
                                   kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
    fc_w = np.zeros((1001, 32), np.float32)
    fc_b = np.full(1001, -30.0, np.float32)  # classes the model never saw stay far below
    fc_w[1:CLASSES + 1] = state["8.weight"]
    fc_b[1:CLASSES + 1] = state["8.bias"]
    inits += [numpy_helper.from_array(fc_w, "fc.w"), numpy_helper.from_array(fc_b, "fc.b")]
    nodes += [helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"),
              helper.make_node("Flatten", ["gap"], ["flat"], name="flat"),
              helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc", transB=1),
              helper.make_node("Softmax", ["logits"], ["softmax_tensor:0"], axis=1),
              helper.make_node("ArgMax", ["softmax_tensor:0"], ["ArgMax:0"], axis=1, keepdims=0)]
    graph = helper.make_graph(
        nodes, "trained_tiny_cnn",
        [helper.make_tensor_value_info("input_tensor:0", TensorProto.FLOAT, ["N", 3, 224, 224])],
        [helper.make_tensor_value_info("ArgMax:0", TensorProto.INT64, ["N"]),
         helper.make_tensor_value_info("softmax_tensor:0", TensorProto.FLOAT, ["N", 1001])],
        initializer=inits)
    return save_model(graph, path)


def make_trained_cnn(root: Path, train_count: int = 300, eval_count: int = 100) -> tuple[Path, Path]:
    """(model.onnx, evaluation dataset dir); built once under ``root``."""
    from mlharness.rules.calibration_lists import official_list

    model, data = root / "trained_cnn.onnx", root / "eval"
    if model.is_file() and (data / "val_map.txt").is_file():
        return model, data
    make_set(root / "train", train_count, seed=1)
    make_set(data, eval_count, seed=2, names=official_list("resnet50").entries()[:eval_count // 2])
    x, y = _arrays(root / "train")
    export_onnx(train(x, y), model)
    return model, data
