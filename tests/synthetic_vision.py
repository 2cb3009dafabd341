"""Synthetic vision datasets and random-weight ONNX models with the official signatures.

Nothing here is downloaded: images are drawn with numpy/PIL, models are built with onnx.helper.

- :func:`make_imagenet` writes an ImageNet-layout folder (JPEGs of varied sizes and aspect
  ratios, some greyscale, one CMYK, plus ``val_map.txt``).
- :func:`make_openimages` writes an OpenImages-MLPerf-layout folder (``validation/data/*.jpg`` +
  ``annotations/openimages-mlperf.json`` in COCO format, several classes and boxes per image).
- :func:`resnet50_onnx` / :func:`retinanet_onnx` build tiny models whose inputs and outputs are
  named and shaped like the official ResNet50 v1.5 and RetinaNet ONNX files.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

#: (height, width, PIL mode) of the ImageNet-layout images, cycled
IMAGENET_SHAPES = [(375, 500, "RGB"), (500, 333, "L"), (224, 224, "RGB"), (301, 999, "CMYK"),
                   (640, 480, "RGB"), (97, 101, "L"), (256, 300, "RGB"), (1000, 250, "RGB")]

#: normalised (xmin, ymin, xmax, ymax) box templates for the OpenImages-layout images
BOX_TEMPLATES = [(0.10, 0.10, 0.45, 0.50), (0.50, 0.20, 0.90, 0.80), (0.20, 0.55, 0.70, 0.95)]
N_CLASSES = 5
OPENIMAGES_SHAPES = [(480, 640), (375, 500), (300, 300), (800, 533), (240, 320), (512, 1024)]


def _picture(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A smooth gradient plus noise, so resizing has something to interpolate."""
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255.0 / max(w - 1, 1), y * 255.0 / max(h - 1, 1),
                     np.full((h, w), rng.uniform(0, 255))], axis=-1)
    noisy = base + rng.normal(0, 20, size=(h, w, 3))
    return np.clip(noisy, 0, 255).astype(np.uint8)


def make_imagenet(root: Path, count: int = 16, seed: int = 0) -> list[tuple[str, int]]:
    """Write ``count`` JPEGs and ``val_map.txt`` under ``root``; return the (file, label) list."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    entries = []
    for i in range(count):
        h, w, mode = IMAGENET_SHAPES[i % len(IMAGENET_SHAPES)]
        name = f"ILSVRC2012_val_{i + 1:08d}.JPEG"
        Image.fromarray(_picture(rng, h, w)).convert(mode).save(root / name, "JPEG", quality=90)
        entries.append((name, int(rng.integers(0, 1000))))
    (root / "val_map.txt").write_text("".join(f"{n} {label}\n" for n, label in entries))
    return entries


def make_openimages(root: Path, count: int = 8, seed: int = 0,
                    image_subdir: str = "validation/data") -> dict:
    """Write ``count`` JPEGs and COCO-format annotations; return the annotation dict."""
    rng = np.random.default_rng(seed)
    img_dir = root / image_subdir
    img_dir.mkdir(parents=True, exist_ok=True)
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    images, annotations = [], []
    for i in range(count):
        h, w = OPENIMAGES_SHAPES[i % len(OPENIMAGES_SHAPES)]
        name = f"{i:016x}.jpg"
        pixels = _picture(rng, h, w)
        mode = "L" if i % 4 == 3 else "RGB"
        Image.fromarray(pixels).convert(mode).save(img_dir / name, "JPEG", quality=90)
        images.append({"id": i + 1, "file_name": name, "height": h, "width": w,
                       "license": None, "coco_url": None})
        picks = rng.choice(len(BOX_TEMPLATES), size=int(rng.integers(1, 4)), replace=False)
        for t in picks:
            x0, y0, x1, y1 = BOX_TEMPLATES[t]
            bbox = [x0 * w, y0 * h, (x1 - x0) * w, (y1 - y0) * h]
            annotations.append({"id": len(annotations) + 1, "image_id": i + 1,
                                "category_id": int(rng.integers(0, N_CLASSES)), "bbox": bbox,
                                "area": bbox[2] * bbox[3], "iscrowd": 0})
    data = {"info": {"dataset": "synthetic"}, "licenses": [],
            "categories": [{"id": c, "name": f"class{c}", "supercategory": None}
                           for c in range(N_CLASSES)],
            "images": images, "annotations": annotations}
    (root / "annotations" / "openimages-mlperf.json").write_text(json.dumps(data))
    return data


def save_model(graph: onnx.GraphProto, path: Path, opset: int = 13) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def resnet50_onnx(path: Path, seed: int = 0) -> Path:
    """Input ``input_tensor:0`` float32 [N,3,224,224]; outputs ``ArgMax:0`` int64 [N] and
    ``softmax_tensor:0`` float32 [N,1001] (class 0 = background), like the official export."""
    rng = np.random.default_rng(seed)
    weight = numpy_helper.from_array(rng.normal(0, 1, (3, 1001)).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.normal(0, 1, (1001,)).astype(np.float32), "B")
    nodes = [
        helper.make_node("GlobalAveragePool", ["input_tensor:0"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("Gemm", ["flat", "W", "B"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["softmax_tensor:0"], axis=1),
        helper.make_node("ArgMax", ["softmax_tensor:0"], ["ArgMax:0"], axis=1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "resnet50_synthetic",
        [helper.make_tensor_value_info("input_tensor:0", TensorProto.FLOAT,
                                       ["unk__N", 3, 224, 224])],
        [helper.make_tensor_value_info("ArgMax:0", TensorProto.INT64, ["unk__N"]),
         helper.make_tensor_value_info("softmax_tensor:0", TensorProto.FLOAT, ["unk__N", 1001])],
        initializer=[weight, bias],
    )
    return save_model(graph, path)


def retinanet_onnx(path: Path, seed: int = 0) -> Path:
    """Input ``images`` float32 [1,3,800,800]; outputs ``boxes`` [K,4] (xmin, ymin, xmax, ymax in
    input pixels), ``scores`` [K] sorted high to low, ``labels`` int64 [K], like the official
    export for one image. Candidates are every box template x class; scores depend on the image."""
    rng = np.random.default_rng(seed)
    cands = [(t, c) for t in range(len(BOX_TEMPLATES)) for c in range(N_CLASSES)]
    k = len(cands)
    boxes = np.array([[v * 800.0 for v in BOX_TEMPLATES[t]] for t, _ in cands], np.float32)
    labels = np.array([c for _, c in cands], np.int64)
    inits = [
        numpy_helper.from_array(boxes, "cand_boxes"),
        numpy_helper.from_array(labels, "cand_labels"),
        numpy_helper.from_array(rng.normal(0, 8, (3, k)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.uniform(-6, 2, (k,)).astype(np.float32), "B"),
        numpy_helper.from_array(np.array([1, 3], np.int64), "shape_1x3"),
        numpy_helper.from_array(np.array([k], np.int64), "shape_k"),
        numpy_helper.from_array(np.array([k], np.int64), "top_k"),
    ]
    nodes = [
        helper.make_node("GlobalAveragePool", ["images"], ["pooled"]),
        helper.make_node("Reshape", ["pooled", "shape_1x3"], ["rgb"]),
        helper.make_node("MatMul", ["rgb", "W"], ["mm"]),
        helper.make_node("Add", ["mm", "B"], ["logits"]),
        helper.make_node("Sigmoid", ["logits"], ["probs"]),
        helper.make_node("Reshape", ["probs", "shape_k"], ["flat_scores"]),
        helper.make_node("TopK", ["flat_scores", "top_k"], ["scores", "order"], axis=0),
        helper.make_node("Gather", ["cand_boxes", "order"], ["boxes"], axis=0),
        helper.make_node("Gather", ["cand_labels", "order"], ["labels"], axis=0),
    ]
    graph = helper.make_graph(
        nodes, "retinanet_synthetic",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 800, 800])],
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [k, 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [k]),
         helper.make_tensor_value_info("labels", TensorProto.INT64, [k])],
        initializer=inits,
    )
    return save_model(graph, path)
