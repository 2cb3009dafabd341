"""Build the embedded demo benchmark: UCI handwritten digits as an ImageNet-layout dataset + ONNX MLP.

The digits (1,797 8x8 greyscale images, UCI ML repository, CC BY 4.0) come from scikit-learn's
bundled copy. The held-out 25% is written as PNG files plus ``val_map.txt``; a small MLP trained on
the rest is exported to ONNX by hand (Flatten -> Gemm -> Relu -> Gemm -> ArgMax).

    python tools/train_demo_model.py            # rewrites src/mlharness/data/demo/
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from PIL import Image
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

OUT = Path(__file__).resolve().parents[1] / "src" / "mlharness" / "data" / "demo"


def to_pixels(images: np.ndarray) -> np.ndarray:
    """Digits are 0..16; store them as 8-bit greyscale, the way the PNGs hold them."""
    return np.rint(images * 255.0 / 16.0).astype(np.uint8)


def export_onnx(clf: MLPClassifier, path: Path) -> None:
    w1, w2 = (w.astype(np.float32) for w in clf.coefs_)
    b1, b2 = (b.astype(np.float32) for b in clf.intercepts_)
    nodes = [
        helper.make_node("Flatten", ["image"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "w1", "b1"], ["hidden_pre"]),
        helper.make_node("Relu", ["hidden_pre"], ["hidden"]),
        helper.make_node("Gemm", ["hidden", "w2", "b2"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["label"], axis=1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "digits_mlp",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10]),
        ],
        initializer=[
            numpy_helper.from_array(w1, "w1"),
            numpy_helper.from_array(b1, "b1"),
            numpy_helper.from_array(w2, "w2"),
            numpy_helper.from_array(b2, "b2"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    digits = load_digits()
    pixels = to_pixels(digits.images)
    x_train, x_test, y_train, y_test = train_test_split(
        pixels, digits.target, test_size=0.25, random_state=args.seed, stratify=digits.target
    )
    clf = MLPClassifier(hidden_layer_sizes=(64,), max_iter=600, random_state=args.seed)
    clf.fit(x_train.reshape(len(x_train), -1) / 255.0, y_train)
    accuracy = clf.score(x_test.reshape(len(x_test), -1) / 255.0, y_test)

    if args.out.exists():
        shutil.rmtree(args.out)
    images = args.out / "dataset"
    images.mkdir(parents=True)
    lines = []
    for i, (img, label) in enumerate(zip(x_test, y_test)):
        name = f"digit_{i:05d}.png"
        Image.fromarray(img, mode="L").save(images / name)
        lines.append(f"{name} {int(label)}")
    (images / "val_map.txt").write_text("\n".join(lines) + "\n")
    export_onnx(clf, args.out / "digits_mlp.onnx")
    print(f"held-out top-1 {accuracy * 100:.2f}% on {len(y_test)} images -> {args.out}")


if __name__ == "__main__":
    main()
