"""Sliding-window inference over one pre-processed volume, as the reference does it
(``base_SUT.py`` ``infer_single_query``, ``inference_utils.py``): ROI windows at the stride,
each window's logits weighted by a gaussian importance patch and summed, the sums divided by the
summed weights, the class the argmax over the channels.

Here the windows are batched: ``predict`` receives ``(n, 1, *roi)`` windows and returns
``(n, classes, *roi)`` logits, one backend call per batch, and a batch's logits are added up on
a helper thread while the next batch runs (``overlap``). The sums are made window by window in
the reference's order and float32 precision, so the labels equal the reference's voxel for
voxel for the same logits.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterator

import numpy as np

from mlharness.tasks.kits19.preprocessing import KITS19, Geometry

#: windows (n, 1, *roi) float32 -> logits (n, classes, *roi) float32
Predict = Callable[[np.ndarray], np.ndarray]

Origin = tuple[int, int, int]


def gaussian_patch(size: int, std: float) -> np.ndarray:
    """The importance patch: the cube root of a separable 3-D gaussian window of ``size`` points
    and deviation ``std``, scaled to a maximum of 1 (float64)."""
    offsets = np.arange(0, size) - (size - 1.0) / 2.0
    line = np.exp(-offsets ** 2 / (2 * std * std))
    cube = np.cbrt(np.multiply.outer(np.multiply.outer(line, line), line))
    cube /= cube.max()
    return cube


def window_origins(shape: tuple[int, ...], geometry: Geometry = KITS19) -> Iterator[Origin]:
    """The corner of every window over a volume of spatial ``shape``, in the reference's order
    (depth, then height, then width); the volume is a multiple of the stride (pre-processing)."""
    counts = [(s - r) // t + 1 for s, r, t in zip(shape, geometry.roi, geometry.strides)]
    d_stride, h_stride, w_stride = geometry.strides
    for i in range(counts[0]):
        for j in range(counts[1]):
            for k in range(counts[2]):
                yield i * d_stride, j * h_stride, k * w_stride


def window_count(shape: tuple[int, ...], geometry: Geometry = KITS19) -> int:
    """How many windows cover a volume of spatial ``shape`` (one backend sample each)."""
    n = 1
    for s, r, t in zip(shape, geometry.roi, geometry.strides):
        n *= (s - r) // t + 1
    return n


def _box(origin: Origin, roi: tuple[int, int, int]) -> tuple[slice, slice, slice]:
    return tuple(slice(o, o + r) for o, r in zip(origin, roi))  # type: ignore[return-value]


def segment(image: np.ndarray, predict: Predict, batch_size: int = 1, overlap: bool = True,
            geometry: Geometry = KITS19, classes: int = 3) -> np.ndarray:
    """The label of every voxel of ``image`` (``(1, D, H, W)`` float32) as uint8 ``(D, H, W)``.

    ``batch_size`` windows go to each ``predict`` call (1 for a model of fixed batch 1);
    ``overlap`` sums one call's logits on a helper thread while the next call runs.
    """
    if image.ndim != 4 or image.shape[0] != 1:
        raise ValueError(f"expected a (1, D, H, W) volume, got {image.shape}")
    shape = image.shape[1:]
    roi = geometry.roi
    patch = gaussian_patch(roi[0], 0.125 * roi[0]).astype(np.float32)
    sums = np.zeros((classes, *shape), np.float32)
    weights = np.zeros(shape, np.float32)
    origins = list(window_origins(shape, geometry))
    batches = [origins[i:i + max(1, batch_size)]
               for i in range(0, len(origins), max(1, batch_size))]

    def run(batch: list[Origin]) -> np.ndarray:
        windows = np.stack([image[(slice(None), *_box(o, roi))] for o in batch])
        logits = np.asarray(predict(windows))
        if logits.shape != (len(batch), classes, *roi):
            raise ValueError(f"the model returned {logits.shape} for {windows.shape} windows; "
                             f"expected {(len(batch), classes, *roi)}")
        return logits

    def add(batch: list[Origin], logits: np.ndarray) -> None:
        logits = logits.astype(np.float32, copy=False)
        for n, origin in enumerate(batch):
            box = _box(origin, roi)
            target = sums[(slice(None), *box)]
            target += logits[n] * patch
            weights[box] += patch

    if overlap and len(batches) > 1:
        # the backend runs on the caller's thread (an engine worker, perhaps pinned); the sums of
        # one batch are made on a helper thread while the next batch runs, in order
        with ThreadPoolExecutor(1, thread_name_prefix="unet-sum") as helper:
            summed: Future[None] | None = None
            for batch in batches:
                logits = run(batch)
                if summed is not None:
                    summed.result()
                summed = helper.submit(add, batch, logits)
            assert summed is not None
            summed.result()
    else:
        for batch in batches:
            add(batch, run(batch))
    sums /= weights
    return np.argmax(sums, axis=0).astype(np.uint8)
