"""YOLO's raw output to the reference's response rows: confidence filter, NMS, boxes, COCO ids.

A YOLO11 detection model (and its ONNX export, output ``output0``) gives, per image, a
``[4 + 80, anchors]`` array: box centre x, y, width, height in letterboxed input pixels, then the
80 class scores (sigmoid applied). The reference hands this to ultralytics' predictor with
``conf=0.001`` and ultralytics' defaults otherwise (ultralytics 8.4.190 ``cfg/default.yaml``:
``iou`` 0.7, ``max_det`` 300, class-aware NMS, one label per box); what ultralytics then does
(``utils/nms.py`` ``non_max_suppression``, torchvision's CPU ``nms`` kernel, ``utils/ops.py``
``scale_boxes``) is reproduced here in float32 numpy:

- a box is a candidate when its best class score is above ``conf`` (strictly); it keeps that
  class only;
- NMS per class: boxes shifted by ``class * 7680`` (float32), taken by score, highest first (a
  stable sort: ties keep anchor order), a box dropped when its IoU with a kept one is above
  ``iou``; the first ``max_det`` kept, in that order;
- boxes moved back to the original image: the letterbox padding subtracted, divided by the gain
  of each axis, clipped to the image.

The response (``yolo_loadgen.py``) is one float32 row per detection ``[qsl_idx, ymin / h,
xmin / w, ymax / h, xmax / w, score, coco_id]`` (float32 divisions), ``coco_id`` being the
80-class index mapped to COCO's 91 category ids; no detection, an empty response.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

#: COCO's category ids of the 80 classes YOLO predicts, in class order (the 80 ids COCO's
#: instances_val2017.json uses); yolo_loadgen.py COCO_80_TO_91
COCO_80_TO_91 = np.array(
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28,
     31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53, 54,
     55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81,
     82, 84, 85, 86, 87, 88, 89, 90], dtype=np.int64)

#: class offset of class-aware NMS (ultralytics' ``max_wh``)
CLASS_OFFSET = 7680
#: candidates NMS looks at, by score (ultralytics' ``max_nms``)
MAX_NMS = 30000


@dataclass(frozen=True)
class NmsSettings:
    """The predictor settings the reference runs with."""

    conf: float = 0.001  # yolo_loadgen.py: model.predict(img_path, conf=0.001)
    iou: float = 0.7
    max_det: int = 300

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Detections:
    """One image's detections: xyxy boxes in original pixels, scores, 80-class labels."""

    boxes: np.ndarray  # float32 [n, 4]
    scores: np.ndarray  # float32 [n]
    classes: np.ndarray  # int64 [n]


#: candidates NMS takes first (by score), then twice as many each round, up to the last
_FIRST_BLOCK, _LAST_BLOCK = 64, 1024


def _overlapping(x1: np.ndarray, y1: np.ndarray, x2: np.ndarray, y2: np.ndarray,
                 areas: np.ndarray, rows: np.ndarray, cols: np.ndarray, iou: float
                 ) -> np.ndarray:
    """``[rows, cols]``: whether IoU(box row, box col) is above ``iou``, each pair computed in
    torchvision's float32 steps (``inter / (area_a + area_b - inter)``, compared as a double)."""
    w = np.minimum(x2[rows, None], x2[None, cols]) - np.maximum(x1[rows, None], x1[None, cols])
    h = np.minimum(y2[rows, None], y2[None, cols]) - np.maximum(y1[rows, None], y1[None, cols])
    np.maximum(w, np.float32(0), out=w)
    np.maximum(h, np.float32(0), out=h)
    inter = w * h
    union = areas[rows, None] + areas[None, cols]
    union -= inter
    return (inter / union).astype(np.float64) > iou


def _settle(over: np.ndarray) -> np.ndarray:
    """Greedy NMS inside one block: ``over[i, j]`` (i before j) says box i would drop box j.
    Box j stays iff no box before it that stays drops it; iterating that rule from "all stay"
    fixes one more box each round and stops at its only fixed point, greedy NMS's answer."""
    over = np.triu(over, 1)
    alive: np.ndarray = np.ones(len(over), dtype=bool)
    while True:
        now: np.ndarray = ~(over & alive[:, None]).any(axis=0)
        if (now == alive).all():
            return alive
        alive = now


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float, limit: int) -> np.ndarray:
    """Indices kept by greedy NMS, by descending score (a stable sort, as torchvision's CPU
    kernel), at most ``limit``; each IoU in torchvision's float32 arithmetic.

    Vectorised by blocks of the score order: a block's boxes are first checked against every box
    kept so far (all of them earlier), then settled among themselves (:func:`_settle`); blocks
    stop once ``limit`` boxes are kept. The decisions are the sequential loop's: a box is
    dropped iff an earlier kept box overlaps it above ``iou``."""
    order = np.argsort(-scores, kind="stable")
    ordered = boxes[order]
    x1, y1, x2, y2 = (np.ascontiguousarray(ordered[:, k]) for k in range(4))
    areas = (x2 - x1) * (y2 - y1)
    kept = np.zeros(0, dtype=np.int64)
    start, size = 0, _FIRST_BLOCK
    while start < len(order) and len(kept) < limit:
        block = np.arange(start, min(len(order), start + size))
        if len(kept):
            block = block[~_overlapping(x1, y1, x2, y2, areas, kept, block, iou).any(axis=0)]
        if len(block) > 1:
            block = block[_settle(_overlapping(x1, y1, x2, y2, areas, block, block, iou))]
        kept = np.concatenate([kept, block])
        start += size
        size = min(2 * size, _LAST_BLOCK)
    return order[kept[:limit]]


def select(prediction: np.ndarray, settings: NmsSettings) -> tuple[np.ndarray, np.ndarray,
                                                                   np.ndarray]:
    """``[4 + nc, anchors]`` raw output -> kept (xyxy input-pixel boxes, scores, classes)."""
    pred = np.asarray(prediction, dtype=np.float32)
    class_scores = pred[4:]
    best = class_scores.max(axis=0)
    cand = np.flatnonzero(best > settings.conf)
    if not len(cand):
        empty = np.zeros((0,), np.float32)
        return np.zeros((0, 4), np.float32), empty, np.zeros((0,), np.int64)
    labels = class_scores[:, cand].argmax(axis=0)
    scores = best[cand]
    xy, wh = pred[0:2, cand].T, pred[2:4, cand].T
    half = wh / np.float32(2)
    boxes = np.concatenate([xy - half, xy + half], axis=1)
    if len(cand) > MAX_NMS:  # never with 640-pixel inputs (8,400 anchors)
        top = np.argsort(-scores, kind="stable")[:MAX_NMS]
        boxes, scores, labels = boxes[top], scores[top], labels[top]
    shifted = boxes + (labels.astype(np.float32) * np.float32(CLASS_OFFSET))[:, None]
    keep = nms(shifted, scores, settings.iou, settings.max_det)
    return boxes[keep], scores[keep], labels[keep]


def scale_boxes(boxes: np.ndarray, boxed: tuple[int, int], original: tuple[int, int]
                ) -> np.ndarray:
    """Letterboxed-input xyxy boxes to the original image, clipped to it (float32)."""
    h1, w1 = boxed
    h0, w0 = original
    gain = min(h1 / h0, w1 / w0)
    new_h, new_w = max(round(h0 * gain), 1), max(round(w0 * gain), 1)
    gain_y, gain_x = new_h / h0, new_w / w0
    pad_x, pad_y = round((w1 - new_w) / 2 - 0.1), round((h1 - new_h) / 2 - 0.1)
    out = boxes.astype(np.float32, copy=True)
    out[:, [0, 2]] -= np.float32(pad_x)
    out[:, [1, 3]] -= np.float32(pad_y)
    out[:, [0, 2]] /= np.float32(gain_x)
    out[:, [1, 3]] /= np.float32(gain_y)
    out[:, [0, 2]] = out[:, [0, 2]].clip(np.float32(0), np.float32(w0))
    out[:, [1, 3]] = out[:, [1, 3]].clip(np.float32(0), np.float32(h0))
    return out


def detect(prediction: np.ndarray, boxed: tuple[int, int], original: tuple[int, int],
           settings: NmsSettings) -> Detections:
    """One image's raw output to its detections in the original image."""
    boxes, scores, labels = select(prediction, settings)
    return Detections(scale_boxes(boxes, boxed, original), scores, labels)


def response_rows(qsl_idx: int, found: Detections, original: tuple[int, int]) -> np.ndarray:
    """float32 ``[n, 7]`` rows as ``yolo_loadgen.py`` packs them."""
    h, w = original
    rows = np.empty((len(found.scores), 7), dtype=np.float32)
    rows[:, 0] = np.float32(qsl_idx)
    rows[:, 1] = found.boxes[:, 1] / np.float32(h)
    rows[:, 2] = found.boxes[:, 0] / np.float32(w)
    rows[:, 3] = found.boxes[:, 3] / np.float32(h)
    rows[:, 4] = found.boxes[:, 2] / np.float32(w)
    rows[:, 5] = found.scores
    rows[:, 6] = COCO_80_TO_91[found.classes].astype(np.float32)
    return rows
