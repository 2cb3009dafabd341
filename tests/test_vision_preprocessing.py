"""Image pre-processing: hand-computed expected arrays, and equality with the reference code."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import referee
from mlharness.errors import ConfigError, DatasetError
from mlharness.tasks.imagenet_preprocessing import resnet50_preprocess
from mlharness.tasks.vision import preprocessing as pp

REFERENCE = "vision/classification_and_detection/python"
MEANS = np.array([123.68, 116.78, 103.94], np.float32)


def blocky(rng: np.random.Generator, h: int, w: int, mode: str = "RGB") -> np.ndarray:
    """An image made of constant 2x2 blocks: halving it with INTER_AREA gives the blocks exactly."""
    channels = 3 if mode == "RGB" else 1
    small = rng.integers(0, 256, (h // 2, w // 2, channels), dtype=np.uint8)
    return small.repeat(2, axis=0).repeat(2, axis=1)


def save_png(path: Path, pixels: np.ndarray) -> Path:
    img = Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels)
    img.save(path, "PNG")
    return path


def test_aspect_size_and_crop_box_truncate_like_the_reference() -> None:
    # short side -> int(100 * 224 / 87.5) = 256, long side int(256 * long / short)
    assert pp.aspect_size(375, 500, 224, 224, 87.5) == (256, 341)
    assert pp.aspect_size(500, 333, 224, 224, 87.5) == (384, 256)
    assert pp.aspect_size(300, 300, 224, 224, 87.5) == (256, 256)
    assert pp.crop_box(256, 341, 224, 224) == (16, 240, 58, 282)
    assert pp.crop_box(257, 257, 224, 224) == (16, 240, 16, 240)


def test_resnet50_square_image_by_hand(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    pixels = blocky(rng, 512, 512)
    out = resnet50_preprocess(save_png(tmp_path / "sq.png", pixels))
    # 512 -> 256 (exact 2x2 means), centre crop rows/cols 16..240, minus the RGB means, CHW
    half = pixels[::2, ::2].astype(np.float32)
    expected = (half[16:240, 16:240] - MEANS).transpose(2, 0, 1)
    assert out.dtype == np.float32 and out.shape == (3, 224, 224)
    np.testing.assert_array_equal(out, expected)


def test_resnet50_wide_image_crops_the_centre(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    pixels = blocky(rng, 512, 1024)
    out = resnet50_preprocess(save_png(tmp_path / "wide.png", pixels))
    half = pixels[::2, ::2].astype(np.float32)  # 256 x 512
    expected = (half[16:240, 144:368] - MEANS).transpose(2, 0, 1)
    np.testing.assert_array_equal(out, expected)


def test_greyscale_becomes_three_equal_channels(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    pixels = blocky(rng, 512, 512, mode="L")
    out = resnet50_preprocess(save_png(tmp_path / "grey.png", pixels))
    grey = pixels[::2, ::2, 0].astype(np.float32)[16:240, 16:240]
    for c in range(3):
        np.testing.assert_array_equal(out[c], grey - MEANS[c])


def test_retinanet_scales_to_unit_range_in_rgb_order(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    pixels = rng.integers(0, 256, (800, 800, 3), dtype=np.uint8)  # already 800x800: no resize
    out = pp.ImagePreprocessor(pp.RETINANET_800)(save_png(tmp_path / "big.png", pixels))
    expected = (pixels.astype(np.float32) / np.float32(255.0)).transpose(2, 0, 1)
    assert out.shape == (3, 800, 800)
    np.testing.assert_array_equal(out, expected)

    colour = np.zeros((300, 450, 3), np.uint8) + np.array([10, 200, 77], np.uint8)
    out = pp.ImagePreprocessor(pp.RETINANET_800)(save_png(tmp_path / "flat.png", colour))
    for c, v in enumerate((10, 200, 77)):
        np.testing.assert_array_equal(out[c], np.full((800, 800), np.float32(v) / np.float32(255)))


def test_unreadable_image_is_a_dataset_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not a jpeg")
    with pytest.raises(DatasetError, match="cannot decode"):
        resnet50_preprocess(bad)


def test_config_from_tables_presets_and_files(tmp_path: Path) -> None:
    assert pp.resolve(None, pp.RESNET50) is pp.RESNET50
    assert pp.resolve("retinanet-800", pp.RESNET50) is pp.RETINANET_800
    custom = pp.resolve({"interpolation": "linear", "mean": [0, 0, 0], "divisor": 255},
                        pp.RESNET50)
    assert custom.interpolation == "linear" and custom.height == 224 and custom.divisor == 255
    assert custom.fingerprint != pp.RESNET50.fingerprint
    renamed = pp.ImagePreprocessing.from_mapping({**pp.RESNET50.to_dict(), "name": "other"})
    assert renamed.fingerprint == pp.RESNET50.fingerprint  # the name does not change the output
    toml = tmp_path / "model.toml"
    toml.write_text('[preprocessing]\nheight = 299\nwidth = 299\nlayout = "NHWC"\n')
    inception = pp.resolve(str(toml), pp.RESNET50)
    assert inception.output_shape == (299, 299, 3)
    with pytest.raises(ConfigError, match="unknown pre-processing key"):
        pp.resolve({"colour": "RGB"}, pp.RESNET50)
    with pytest.raises(ConfigError, match="interpolation"):
        pp.resolve({"interpolation": "bogus"}, pp.RESNET50)
    with pytest.raises(ConfigError, match="unknown pre-processing"):
        pp.resolve("no-such-preset", pp.RESNET50)


def test_nhwc_bgr_layouts(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    pixels = blocky(rng, 512, 512)
    path = save_png(tmp_path / "x.png", pixels)
    cfg = pp.resolve({"layout": "NHWC", "channel_order": "BGR", "mean": [0, 0, 0]}, pp.RESNET50)
    out = pp.ImagePreprocessor(cfg)(path)
    expected = pixels[::2, ::2].astype(np.float32)[16:240, 16:240, ::-1]
    np.testing.assert_array_equal(out, expected)


REFERENCE_SCRIPT = """\
import sys
import cv2
import numpy as np
sys.path.insert(0, sys.argv[1])
import dataset  # vision/classification_and_detection/python/dataset.py
out = {}
for i, path in enumerate(sys.argv[3:]):
    out[f"vgg{i}"] = dataset.pre_process_vgg(cv2.imread(path), dims=[224, 224, 3],
                                             need_transpose=True)
    out[f"retinanet{i}"] = dataset.pre_process_openimages_retinanet(
        cv2.imread(path), dims=[800, 800, 3], need_transpose=True)
np.savez(sys.argv[2], **out)
"""


@referee.official(f"{REFERENCE}/dataset.py", python=True)
def test_equal_to_the_reference_functions(tmp_path: Path) -> None:
    """The reference's own pre-processing (imported from the official checkout, not copied),
    run in the referee's Python on the same images, gives arrays equal to ours."""
    from synthetic_vision import make_imagenet

    entries = make_imagenet(tmp_path, count=8)  # RGB, greyscale and CMYK JPEGs, many shapes
    paths = [str(tmp_path / name) for name, _ in entries]
    (tmp_path / "reference.py").write_text(REFERENCE_SCRIPT)
    referee.python(str(tmp_path / "reference.py"), str(referee.INFERENCE / REFERENCE),
                   str(tmp_path / "want.npz"), *paths)
    want = np.load(tmp_path / "want.npz")
    retinanet = pp.ImagePreprocessor(pp.RETINANET_800)
    for i, path in enumerate(paths):
        np.testing.assert_array_equal(resnet50_preprocess(Path(path)), want[f"vgg{i}"])
        np.testing.assert_array_equal(retinanet(Path(path)), want[f"retinanet{i}"])
