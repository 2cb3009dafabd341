"""Folder layouts checked when a dataset is adopted: what the official tools expect."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from mlharness.artefacts.errors import ArtefactError

#: the ImageNet 2012 validation set: images, classes
IMAGENET_IMAGES = 50_000
IMAGENET_CLASSES = 1_000


def check_imagenet(folder: Path, val_map: Path | None = None, *, expected: int = IMAGENET_IMAGES,
                   on_count: Callable[[int, int], None] | None = None) -> int:
    """Check an ImageNet validation folder against ``val_map.txt`` (``<file> <label>`` lines,
    labels 0..999, every file present); returns the image count."""
    val_map = val_map or folder / "val_map.txt"
    if not val_map.is_file():
        raise ArtefactError(f"{folder}: no val_map.txt",
                            hint="`mlharness get imagenet-aux` first: its val.txt is written as "
                            "val_map.txt beside the images' links")
    lines = val_map.read_text(encoding="utf-8").splitlines()
    lines = [line for line in lines if line.strip()]
    if len(lines) != expected:
        raise ArtefactError(f"{val_map}: {len(lines):,} images listed, the ImageNet 2012 "
                            f"validation set has {expected:,}",
                            hint="give the complete set (ILSVRC2012_img_val.tar unpacked)")
    for number, line in enumerate(lines, 1):
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit() or int(parts[1]) >= IMAGENET_CLASSES:
            raise ArtefactError(f"{val_map}:{number}: {line!r} is not '<file> <label 0..999>'",
                                hint="use val.txt from caffe_ilsvrc12 (mlharness get imagenet-aux)")
        if not (folder / parts[0]).is_file():
            raise ArtefactError(f"{folder}: {parts[0]} (listed on line {number} of val_map.txt) "
                                "is missing", hint="unpack the whole ILSVRC2012_img_val.tar there")
        if on_count and number % 1000 == 0:
            on_count(number, expected)
    return len(lines)


#: where the OpenImages MLPerf folder keeps its annotation file and its images
OPENIMAGES_ANNOTATIONS = "annotations/openimages-mlperf.json"
OPENIMAGES_IMAGES = "validation/data"


def openimages_images(annotations: Path) -> list[dict]:
    """The ``images`` of an OpenImages MLPerf (COCO format) annotation file."""
    import json

    try:
        data = json.loads(annotations.read_text(encoding="utf-8"))
        images = data["images"]
        for image in images:
            str(image["file_name"]), int(image["width"]), int(image["height"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ArtefactError(f"{annotations}: not an OpenImages MLPerf annotation file ({exc})",
                            hint="`mlharness get openimages-annotations` again") from exc
    return images


def check_openimages(folder: Path, *, expected: int) -> int:
    """Check an OpenImages MLPerf folder: its annotation file lists ``expected`` images and
    every one is in ``validation/data/`` (or the folder itself); returns the image count."""
    annotations = folder / OPENIMAGES_ANNOTATIONS
    if not annotations.is_file():
        raise ArtefactError(f"{folder}: no {OPENIMAGES_ANNOTATIONS}",
                            hint="the folder tools/openimages_mlperf.sh writes has it; or "
                            "`mlharness get openimages-mlperf` builds one")
    images = openimages_images(annotations)
    if expected and len(images) != expected:
        raise ArtefactError(f"{annotations}: {len(images):,} images listed, the MLPerf subset "
                            f"has {expected:,}", hint="use the complete subset's annotation file")
    for image in images:
        name = image["file_name"]
        if not ((folder / OPENIMAGES_IMAGES / name).is_file() or (folder / name).is_file()):
            raise ArtefactError(f"{folder}: image {name} is missing",
                                hint="`mlharness get openimages-mlperf` fetches what is missing")
    return len(images)


def check_hf_dataset(folder: Path, *, expected: int,
                     splits: tuple[str, ...] = ("train", "test")) -> int:
    """Check a Hugging Face data set folder (parquet shards or ``datasets``' arrow cache,
    ``hf_layout``): its ``splits`` (those present; the first must be) hold ``expected`` rows
    together; returns the row count."""
    # lazy: pyarrow comes with the llm extra; `mlharness get` lists artefacts without it
    from mlharness.artefacts.hf_layout import find

    layout = find(folder, splits)
    rows = layout.rows()
    if expected and rows != expected:
        raise ArtefactError(f"{folder}: {rows:,} rows in its {' + '.join(layout.splits)} "
                            f"split(s), the data set has {expected:,}",
                            hint="give the complete data set at the revision the benchmark names")
    return rows
