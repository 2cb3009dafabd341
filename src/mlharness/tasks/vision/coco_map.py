"""COCO mAP over LoadGen accuracy entries, computed as ``tools/accuracy-openimages.py`` does.

Each response is float32 rows ``[qsl_idx, ymin, xmin, ymax, xmax, score, class]`` with boxes
normalised to the original image. Entries are de-duplicated by qsl_idx (first one wins); an empty
(or shorter than one row) response marks an image with no detections, which still counts in the
evaluation. Boxes are scaled by the annotation's height/width in float32, turned into COCO
``[x, y, w, h]`` and scored with pycocotools' COCOeval (bbox); the metric is ``stats[0]``
(AP at IoU 0.50:0.95, all areas, 100 detections), printed as ``mAP=X%`` with three decimals.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mlharness.tasks.base import AccuracyResult
from mlharness.tasks.vision.openimages import ImageRecord


@dataclass
class MapResult:
    value: float  # percent
    summary: str  # pycocotools' summarize() table
    images: int
    detections: int
    no_results: int
    duplicates: int
    mismatched_idx: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        metric = f"mAP={self.value:.3f}%"
        return f"{self.summary.rstrip()}\n{metric}" if self.summary.strip() else metric


def decode(entries: Sequence[tuple[int, bytes]], images: Sequence[ImageRecord]
           ) -> tuple[list[dict[str, Any]], set[int], dict[str, int]]:
    """COCO detection dicts, the image ids taking part, and counters."""
    detections: list[dict[str, Any]] = []
    image_ids: set[int] = set()
    seen: set[int] = set()
    no_results = mismatched = 0
    for qsl_idx, payload in entries:
        if qsl_idx in seen:
            continue
        seen.add(qsl_idx)
        image = images[qsl_idx]
        data = np.frombuffer(payload, np.float32)
        if len(data) < 7:
            image_ids.add(image.id)
            no_results += 1
            continue
        rows = data[: len(data) // 7 * 7].reshape(-1, 7)
        mismatched += int(np.count_nonzero(rows[:, 0].astype(np.int64) != qsl_idx))
        # float32 * int stays float32, as in the official script
        ymin = rows[:, 1] * image.height
        xmin = rows[:, 2] * image.width
        ymax = rows[:, 3] * image.height
        xmax = rows[:, 4] * image.width
        width = xmax - xmin
        height = ymax - ymin
        for i in range(len(rows)):
            detections.append({
                "image_id": image.id,
                "category_id": int(rows[i, 6]),
                "bbox": [float(xmin[i]), float(ymin[i]), float(width[i]), float(height[i])],
                "score": float(rows[i, 5]),
            })
        image_ids.add(image.id)
    counts = {"no_results": no_results, "duplicates": len(entries) - len(seen),
              "mismatched_idx": mismatched}
    return detections, image_ids, counts


def coco_map(annotations: Path, entries: Sequence[tuple[int, bytes]],
             images: Sequence[ImageRecord]) -> MapResult:
    """Score ``(qsl_idx, payload)`` entries against the COCO-format ``annotations`` file."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    detections, image_ids, counts = decode(entries, images)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        gt = COCO(str(annotations))
        if detections:
            dt = gt.loadRes(detections)
            ev = COCOeval(gt, dt, iouType="bbox")
            ev.params.imgIds = list(image_ids)
            ev.evaluate()
            ev.accumulate()
            ev.summarize()
            value = 100.0 * float(ev.stats[0])
        else:  # pycocotools cannot load an empty result list; nothing detected scores 0
            value = 0.0
    summary = "\n".join(line for line in out.getvalue().splitlines()
                        if line.startswith(" Average"))
    return MapResult(value, summary, len(image_ids), len(detections), counts["no_results"],
                     counts["duplicates"], counts["mismatched_idx"])


def coco_accuracy(annotations: Path, entries: Sequence[tuple[int, bytes]],
                  images: Sequence[ImageRecord], target: float | None) -> AccuracyResult:
    """:func:`coco_map` as a task's accuracy result: mAP, its summary lines and the counts."""
    result = coco_map(annotations, entries, images)
    details = {
        "images": result.images, "detections": result.detections,
        "no_results": result.no_results, "duplicates": result.duplicates,
        "mismatched_idx": result.mismatched_idx, "dataset_size": len(images),
    }
    return AccuracyResult("mAP", result.value, result.text, target, details)
