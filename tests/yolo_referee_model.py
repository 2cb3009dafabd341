"""Build the tests' YOLO11 in the YOLO referee's Python (ultralytics): random weights from
ultralytics' own ``yolo11n.yaml`` (the official model is YOLO11-L: the same architecture,
larger), no download.

Usage: ``python yolo_referee_model.py [--size S | --checkpoint PT] OUT_DIR [IMAGE...]`` writes
``OUT_DIR/yolo11S-random.pt`` (``S``: n by default, l for the benchmark's size; saved by
ultralytics, as its published checkpoints are: fp16 weights), its ONNX exports
``yolo11S-random.onnx`` (dynamic batch, height, width) and ``yolo11S-random-640.onnx`` (fixed
1 x 3 x 640 x 640), and copies ultralytics' sample photographs (``bus.jpg``, ``zidane.jpg``)
into ``OUT_DIR``. ``--checkpoint PT``: a trained checkpoint you have (e.g. the published
``yolo11l.pt``) copied as ``OUT_DIR/<its name>`` and exported the same way, instead.

A freshly initialised YOLO answers the same for every image: its activations vanish layer by
layer (to ~1e-10 at the head) and the class biases start at about -11 (scores ~1e-5, nothing
above the reference's 0.001). So, as a data-dependent initialisation, every BatchNorm takes its
running statistics from the photographs (ultralytics' two and the IMAGEs given: one forward
pass in training mode; an image left out can drive activations far enough that PyTorch and
onnxruntime differ by 0.2 pixel), the box logits
are doubled and the class biases set near -6.5: scores then spread from 0.001 to ~0.95 and
depend on the image, which is what the comparisons need.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import cv2
import numpy as np
import torch
from ultralytics import YOLO
from ultralytics.data.augment import LetterBox
from ultralytics.utils import ASSETS


def main() -> None:
    args = sys.argv[1:]
    size, checkpoint = "n", None
    if args[:1] == ["--size"]:
        size, args = args[1], args[2:]
    if args[:1] == ["--checkpoint"]:
        checkpoint, args = Path(args[1]), args[2:]
    out = Path(args[0])
    out.mkdir(parents=True, exist_ok=True)
    for name in ("bus.jpg", "zidane.jpg"):
        shutil.copyfile(ASSETS / name, out / name)
    if checkpoint is not None:
        pt = out / checkpoint.name
        shutil.copyfile(checkpoint, pt)
        export(pt)
        return
    paths = [out / "bus.jpg", out / "zidane.jpg", *map(Path, args[1:])]
    images = [cv2.imread(str(p)) for p in paths]

    torch.manual_seed(0)
    model = YOLO(f"yolo11{size}.yaml")
    net = model.model
    head = net.model[-1]
    boxed = np.stack([LetterBox((640, 640))(image=im) for im in images])
    x = torch.from_numpy(boxed[..., ::-1].copy()).permute(0, 3, 1, 2).float() / 255
    bns = [m for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for bn in bns:
        bn.momentum = 1.0
    net.train()
    with torch.no_grad():
        net(x)
        gen = torch.Generator().manual_seed(1)
        for box_branch, cls_branch in zip(head.cv2, head.cv3):
            box_branch[-1].weight.mul_(2.0)
            bias = cls_branch[-1].bias
            bias.copy_(torch.randn(bias.shape, generator=gen) * 0.3 - 6.5)
    for bn in bns:
        bn.momentum = 0.03
    net.eval()
    pt = out / f"yolo11{size}-random.pt"
    model.save(str(pt))
    export(pt)


def export(pt: Path) -> None:
    """``<pt stem>-640.onnx`` (fixed 640 x 640) and ``<pt stem>.onnx`` (dynamic) beside ``pt``."""
    # both exports write <stem>.onnx beside the checkpoint: the fixed one first
    fixed = YOLO(str(pt)).export(format="onnx", dynamic=False, imgsz=640)
    shutil.move(fixed, pt.with_name(pt.stem + "-640.onnx"))
    YOLO(str(pt)).export(format="onnx", dynamic=True, imgsz=640)


if __name__ == "__main__":
    main()
