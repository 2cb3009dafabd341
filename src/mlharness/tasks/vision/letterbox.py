"""YOLO's input images: decoded, letterboxed and made model inputs as the reference gets them.

The reference (``vision/classification_and_detection/yolo/yolo_loadgen.py``) calls ultralytics'
``model.predict(path, conf=0.001)`` on one image file per sample. What ultralytics does to the
file first (ultralytics 8.4.190: ``utils/patches.py`` ``imread``, ``data/augment.py``
``LetterBox``, ``engine/predictor.py`` ``pre_transform`` / ``preprocess``) is reproduced here
step for step in numpy and OpenCV, so the arrays are equal:

1. the file's bytes decoded by ``cv2.imdecode`` in colour mode (3-channel BGR uint8; JPEG EXIF
   orientation applied by OpenCV); the decoded height and width are the *original shape* the
   boxes are scaled back to;
2. scaled by ``r = min(640 / h0, 640 / w0)`` (up or down) to ``round(w0 * r) x round(h0 * r)``
   (at least 1 pixel) with ``INTER_LINEAR``;
3. padded with grey (114) around the centre: to 640 x 640 (``rect=False``: a model of fixed
   input shape), or, as ultralytics does for a PyTorch checkpoint or an ONNX export with dynamic
   axes (``rect=True``, the reference's ``.pt`` run), only up to the next multiple of the stride
   (32) on each side: a 640 x 480 photograph stays 480 x 640, a 640 x 427 one becomes 448 x 640;
4. as the model's input: BGR to RGB, HWC to CHW, float32 divided by 255.

A pre-processed sample is kept as uint8 (a quarter of the float32 bytes, for the sample cache)
with a small header giving both shapes: :func:`pack` / :func:`unpack`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mlharness.errors import ConfigError, DatasetError

#: bump when the code below changes its output (invalidates cached samples)
PIPELINE_VERSION = 1
#: ultralytics' LetterBox padding value
PAD_VALUE = 114
#: the header of a packed sample: original height, width; letterboxed height, width (int32)
_HEADER = 4


@dataclass(frozen=True)
class LetterboxConfig:
    """How YOLO's inputs are made: target size, stride, rectangular padding."""

    imgsz: int = 640
    stride: int = 32
    rect: bool = True

    def __post_init__(self) -> None:
        if self.imgsz < self.stride or self.stride < 1 or self.imgsz % self.stride:
            raise ConfigError(f"imgsz {self.imgsz} must be a positive multiple of the stride "
                              f"{self.stride}", hint="YOLO11 takes imgsz=640, stride 32")

    @property
    def fingerprint(self) -> str:
        blob = json.dumps({"v": PIPELINE_VERSION, "kind": "yolo-letterbox", **asdict(self)},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "yolo-letterbox", **asdict(self)}


@dataclass(frozen=True)
class Placement:
    """Where the resized image sits in the letterboxed one."""

    resized_h: int
    resized_w: int
    top: int
    bottom: int
    left: int
    right: int

    @property
    def shape(self) -> tuple[int, int]:
        return (self.resized_h + self.top + self.bottom, self.resized_w + self.left + self.right)


def placement(h0: int, w0: int, config: LetterboxConfig) -> Placement:
    """The resize and padding of an ``h0 x w0`` image (Python's rounding, as ultralytics')."""
    size = config.imgsz
    r = min(size / h0, size / w0)
    new_w, new_h = max(round(w0 * r), 1), max(round(h0 * r), 1)
    dw, dh = size - new_w, size - new_h
    if config.rect:  # only up to the next multiple of the stride
        dw, dh = dw % config.stride, dh % config.stride
    half_w, half_h = dw / 2, dh / 2
    return Placement(new_h, new_w, round(half_h - 0.1), round(half_h + 0.1),
                     round(half_w - 0.1), round(half_w + 0.1))


def decode(path: Path) -> np.ndarray:
    """The file as 3-channel BGR uint8, decoded from its bytes as ultralytics reads it."""
    import cv2

    try:
        data = np.fromfile(str(path), np.uint8)
    except OSError as exc:
        raise DatasetError(f"cannot read image {path}: {exc}", hint="check the dataset folder") \
            from exc
    image = cv2.imdecode(data, cv2.IMREAD_COLOR) if data.size else None
    if image is None:
        raise DatasetError(f"cannot decode image {path}",
                           hint="the file is truncated or not an image OpenCV can read")
    return image


def letterbox(image: np.ndarray, config: LetterboxConfig) -> np.ndarray:
    """The BGR uint8 image resized and padded (HWC)."""
    import cv2

    h0, w0 = image.shape[:2]
    place = placement(h0, w0, config)
    if (place.resized_h, place.resized_w) != (h0, w0):
        image = cv2.resize(image, (place.resized_w, place.resized_h),
                           interpolation=cv2.INTER_LINEAR)
    return cv2.copyMakeBorder(image, place.top, place.bottom, place.left, place.right,
                              cv2.BORDER_CONSTANT, value=(PAD_VALUE,) * 3)


def pack(original: tuple[int, int], boxed: np.ndarray) -> np.ndarray:
    """One uint8 array: the header (both shapes, int32) then the letterboxed HWC pixels."""
    header = np.array([original[0], original[1], boxed.shape[0], boxed.shape[1]], "<i4")
    return np.concatenate([header.view(np.uint8), np.ascontiguousarray(boxed).reshape(-1)])


def unpack(sample: np.ndarray) -> tuple[tuple[int, int], np.ndarray]:
    """``(original (h, w), letterboxed HWC BGR uint8 view)`` of a packed sample."""
    h0, w0, h1, w1 = (int(v) for v in sample[: _HEADER * 4].view("<i4"))
    return (h0, w0), sample[_HEADER * 4:].reshape(h1, w1, 3)


def boxed_shape(sample: np.ndarray) -> tuple[int, int]:
    """The letterboxed (h, w) of a packed sample."""
    _, _, h1, w1 = (int(v) for v in sample[: _HEADER * 4].view("<i4"))
    return h1, w1


def model_input(boxed: Sequence[np.ndarray]) -> np.ndarray:
    """float32 NCHW RGB in [0, 1] from letterboxed BGR HWC images of one shape."""
    batch = np.stack(boxed)[..., ::-1].transpose(0, 3, 1, 2)
    return np.ascontiguousarray(batch, dtype=np.float32) / np.float32(255)


class LetterboxPreprocessor:
    """A picklable ``path -> packed sample`` (what the sample cache and its workers call)."""

    def __init__(self, config: LetterboxConfig) -> None:
        self.config = config

    @property
    def fingerprint(self) -> str:
        return self.config.fingerprint

    def __call__(self, path: Path) -> np.ndarray:
        image = decode(path)
        return pack(image.shape[:2], letterbox(image, self.config))
