"""ultralytics' own NMS on raw YOLO outputs, in the YOLO referee's Python (torchvision's kernel,
as in the reference's runs): what ``tests/test_yolo_reference.py`` compares mlharness's NMS with.

Usage: ``python yolo_referee_nms.py IN.npz OUT.npz``: for each array ``raw_K`` of IN (``[4 + 80,
anchors]`` float32, one image), ``det_K`` of OUT holds ultralytics' ``non_max_suppression`` at
the reference's settings (``conf=0.001``, ``iou=0.7``, ``max_det=300``): ``[n, 6]`` rows of
x1, y1, x2, y2, score, class in input pixels.
"""

from __future__ import annotations

import sys

import numpy as np
import torch
import torchvision  # noqa: F401 - ultralytics takes torchvision's nms when it is imported
from ultralytics.utils.nms import non_max_suppression


def main() -> None:
    cases = np.load(sys.argv[1])
    out = {}
    for name in cases.files:
        raw = torch.from_numpy(cases[name][None])
        [det] = non_max_suppression(raw, conf_thres=0.001, iou_thres=0.7, max_det=300)
        out["det_" + name.split("_", 1)[1]] = det.numpy().astype(np.float32)
    np.savez(sys.argv[2], **out)


if __name__ == "__main__":
    main()
