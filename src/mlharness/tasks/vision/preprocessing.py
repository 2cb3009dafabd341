"""Declarative image pre-processing: a frozen config and the OpenCV pipeline that applies it.

A model declares how its inputs are made (size, resize rule, interpolation, channel order,
normalisation, layout) as an :class:`ImagePreprocessing`; the presets below reproduce the
reference implementation (``vision/classification_and_detection/python/dataset.py`` in
mlcommons/inference) step for step, including the float32 arithmetic, so the arrays are equal.

The pipeline, in order:

1. decode with ``cv2.imread`` in colour mode (as the reference's dataset modules do: greyscale,
   palette, alpha and CMYK files all come out as 3-channel BGR uint8);
2. optionally convert to float32 *before* resizing (``resize_dtype``);
3. convert BGR to the model's channel order;
4. resize: ``aspect-crop`` scales the short side to ``size * 100 / crop_percent`` (the long side
   proportionally, both truncated to int) and centre-crops ``size``; ``stretch`` resizes straight
   to ``size``;
5. float32, then ``x / divisor``, ``x - mean``, ``x / std`` (each skipped when it is the identity);
6. HWC -> CHW when ``layout`` is ``NCHW``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from mlharness.errors import ConfigError, DatasetError

#: bump when the pipeline's code changes in a way that changes its output (invalidates caches)
PIPELINE_VERSION = 1

_INTERPOLATIONS = ("nearest", "linear", "cubic", "area", "lanczos")
_RESIZES = ("aspect-crop", "stretch")


@dataclass(frozen=True)
class ImagePreprocessing:
    """How one model's input images are made from image files."""

    name: str
    height: int
    width: int
    resize: str = "aspect-crop"
    crop_percent: float = 87.5
    interpolation: str = "area"
    resize_dtype: str = "uint8"
    channel_order: str = "RGB"
    divisor: float = 1.0
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    layout: str = "NCHW"

    def __post_init__(self) -> None:
        problems = []
        if self.resize not in _RESIZES:
            problems.append(f"resize must be one of {_RESIZES}, got {self.resize!r}")
        if self.interpolation not in _INTERPOLATIONS:
            problems.append(f"interpolation must be one of {_INTERPOLATIONS}, "
                            f"got {self.interpolation!r}")
        if self.resize_dtype not in ("uint8", "float32"):
            problems.append(f"resize_dtype must be uint8 or float32, got {self.resize_dtype!r}")
        if self.channel_order not in ("RGB", "BGR"):
            problems.append(f"channel_order must be RGB or BGR, got {self.channel_order!r}")
        if self.layout not in ("NCHW", "NHWC"):
            problems.append(f"layout must be NCHW or NHWC, got {self.layout!r}")
        if self.height < 1 or self.width < 1:
            problems.append(f"height and width must be >= 1, got {self.height}x{self.width}")
        if not 0 < self.crop_percent <= 100:
            problems.append(f"crop_percent must be in (0, 100], got {self.crop_percent}")
        if self.divisor == 0 or any(s == 0 for s in self.std):
            problems.append("divisor and std must be non-zero")
        if len(self.mean) != 3 or len(self.std) != 3:
            problems.append("mean and std need three values (one per channel)")
        if problems:
            raise ConfigError(f"bad pre-processing {self.name!r}: " + "; ".join(problems),
                              hint="fix the [preprocessing] table of the model's config")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ImagePreprocessing:
        """Build from a TOML/JSON table; unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown pre-processing key(s): {', '.join(unknown)}",
                              hint="valid keys: " + ", ".join(sorted(known)))
        values = dict(data)
        for key in ("mean", "std"):
            if key in values:
                values[key] = tuple(float(v) for v in values[key])
        values.setdefault("name", "custom")
        return cls(**values)

    @property
    def output_shape(self) -> tuple[int, int, int]:
        c, h, w = 3, self.height, self.width
        return (c, h, w) if self.layout == "NCHW" else (h, w, c)

    @property
    def fingerprint(self) -> str:
        """A short hash of every parameter that changes the output array."""
        params = asdict(self)
        params.pop("name")
        blob = json.dumps({"v": PIPELINE_VERSION, **params}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: ResNet50 v1.5, TF/ONNX weights: the reference's ``imagenet`` dataset with ``pre_process_vgg``
#: (dataset.py: INTER_AREA, short side 224 * 100 / 87.5 = 256, centre crop 224, RGB,
#: means 123.68 / 116.78 / 103.94, no scaling; NCHW for onnxruntime, backend_onnxruntime.py).
RESNET50 = ImagePreprocessing(
    name="resnet50", height=224, width=224, resize="aspect-crop", crop_percent=87.5,
    interpolation="area", resize_dtype="uint8", channel_order="RGB",
    mean=(123.68, 116.78, 103.94),
)

#: RetinaNet 800x800: ``pre_process_openimages_retinanet`` (dataset.py ``maybe_resize``): pixels
#: to float32 first, RGB, INTER_LINEAR straight to 800x800, divided by 255.0; NCHW.
RETINANET_800 = ImagePreprocessing(
    name="retinanet-800", height=800, width=800, resize="stretch", interpolation="linear",
    resize_dtype="float32", channel_order="RGB", divisor=255.0,
)

#: torchvision's ImageNet transform (resize 256, centre crop 224, /255, mean/std normalise) in
#: OpenCV terms, for torchvision-trained weights on the pytorch backend (bilinear in OpenCV, not
#: PIL's antialiased resize: close, not bit-equal)
TORCHVISION = ImagePreprocessing(
    name="torchvision", height=224, width=224, resize="aspect-crop", crop_percent=87.5,
    interpolation="linear", resize_dtype="uint8", channel_order="RGB",
    mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375),
)

PRESETS: dict[str, ImagePreprocessing] = {p.name: p for p in (RESNET50, RETINANET_800,
                                                              TORCHVISION)}


def resolve(value: str | Mapping[str, Any] | ImagePreprocessing | None,
            default: ImagePreprocessing) -> ImagePreprocessing:
    """A preset name, a table of keys (over ``default``), a config, or None for ``default``."""
    if value is None:
        return default
    if isinstance(value, ImagePreprocessing):
        return value
    if isinstance(value, str):
        if value in PRESETS:
            return PRESETS[value]
        path = Path(value).expanduser()
        if path.suffix in (".toml", ".json") and path.is_file():
            return resolve(_read_table(path), default)
        raise ConfigError(f"unknown pre-processing {value!r}",
                          hint="use a preset (" + ", ".join(PRESETS) + ") or a .toml/.json file")
    merged = {**default.to_dict(), "name": "custom", **dict(value)}
    return ImagePreprocessing.from_mapping(merged)


def _read_table(path: Path) -> dict[str, Any]:
    text = path.read_text()
    if path.suffix == ".json":
        data = json.loads(text)
    else:
        import tomllib

        data = tomllib.loads(text)
    return dict(data.get("preprocessing", data))


def read_image(path: Path) -> np.ndarray:
    """Decode an image file to 3-channel BGR uint8, as ``cv2.imread`` does by default."""
    import cv2

    img = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if img is None:
        raise DatasetError(f"cannot decode image {path}",
                           hint="the file is missing, truncated or not an image OpenCV can read")
    return img


def aspect_size(height: int, width: int, out_h: int, out_w: int, percent: float) -> tuple[int, int]:
    """(h, w) with the short side at ``out * 100 / percent``, truncated as the reference does."""
    short_h = int(100.0 * out_h / percent)
    short_w = int(100.0 * out_w / percent)
    if height > width:
        return int(short_h * height / width), short_w
    return short_h, int(short_w * width / height)


def crop_box(height: int, width: int, out_h: int, out_w: int) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) of the centred out_h x out_w crop, as the reference cuts it."""
    return (int((height - out_h) / 2), int((height + out_h) / 2),
            int((width - out_w) / 2), int((width + out_w) / 2))


def apply(cfg: ImagePreprocessing, bgr: np.ndarray) -> np.ndarray:
    """Run the pipeline on a decoded BGR image (H, W, 3)."""
    import cv2

    inter = {"nearest": cv2.INTER_NEAREST, "linear": cv2.INTER_LINEAR, "cubic": cv2.INTER_CUBIC,
             "area": cv2.INTER_AREA, "lanczos": cv2.INTER_LANCZOS4}[cfg.interpolation]
    img = bgr if cfg.resize_dtype == "uint8" else bgr.astype(np.float32)
    if cfg.channel_order == "RGB":
        img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    if cfg.resize == "stretch":
        img = cv2.resize(img, (cfg.width, cfg.height), interpolation=inter)
    else:
        h, w = aspect_size(img.shape[0], img.shape[1], cfg.height, cfg.width, cfg.crop_percent)
        img = cv2.resize(img, (w, h), interpolation=inter)
        top, bottom, left, right = crop_box(h, w, cfg.height, cfg.width)
        img = img[top:bottom, left:right]
    out = np.array(img, dtype=np.float32)
    if cfg.divisor != 1.0:
        out /= np.float32(cfg.divisor)
    if any(cfg.mean):
        out -= np.array(cfg.mean, dtype=np.float32)
    if any(s != 1.0 for s in cfg.std):
        out /= np.array(cfg.std, dtype=np.float32)
    if cfg.layout == "NCHW":
        out = out.transpose(2, 0, 1)
    return np.ascontiguousarray(out)


class ImagePreprocessor:
    """A picklable callable ``path -> array`` for one config (what tasks and cache workers use)."""

    def __init__(self, config: ImagePreprocessing) -> None:
        self.config = config

    @property
    def fingerprint(self) -> str:
        return self.config.fingerprint

    def __call__(self, path: Path) -> np.ndarray:
        return apply(self.config, read_image(path))
