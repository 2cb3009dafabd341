"""The OpenImages MLPerf layout: images + ``annotations/openimages-mlperf.json`` (COCO format).

The QSL index of a sample is its position in the annotation file's ``images`` list, which is how
the reference dataset (``python/openimages.py``) and ``tools/accuracy-openimages.py`` both count.
Images live in ``<dir>/validation/data/`` (the layout ``tools/openimages_mlperf.sh`` downloads)
or directly in ``<dir>/``. ``$DATASET_ANNOTATIONS_FILE_PATH`` overrides the annotation file, as in
the official accuracy script.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from mlharness.errors import DatasetError
from mlharness.files import read_text_file
from mlharness.tasks.vision.image_set import confined

ANNOTATIONS = Path("annotations") / "openimages-mlperf.json"
IMAGE_DIRS = (Path("validation") / "data", Path("."))


@dataclass(frozen=True)
class ImageRecord:
    """One entry of the annotation file's ``images`` list."""

    id: int
    file_name: str
    height: int
    width: int


def annotations_path(dataset_dir: Path, override: Path | str | None = None) -> Path:
    """Where the COCO-format annotations are: explicit path, env override, or the layout's own."""
    chosen = override or os.environ.get("DATASET_ANNOTATIONS_FILE_PATH")
    path = Path(chosen).expanduser() if chosen else dataset_dir / ANNOTATIONS
    if not path.is_file():
        raise DatasetError(
            f"annotation file not found: {path}",
            hint="an OpenImages MLPerf dataset needs annotations/openimages-mlperf.json "
                 "(tools/openimages_mlperf.sh in mlcommons/inference writes it)",
        )
    return path


def read_images(path: Path) -> list[ImageRecord]:
    """The ``images`` list of a COCO-format annotation file, in file order."""
    text = read_text_file(path, "the annotation file", DatasetError)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"cannot read {path}: {exc}",
                           hint="the annotation file must be COCO-format JSON") from exc
    images = data.get("images") if isinstance(data, dict) else None
    if not images or not isinstance(images, list):
        raise DatasetError(f"{path} lists no images",
                           hint="the file needs a non-empty 'images' list (COCO format)")
    # scoring (pycocotools) needs both lists: check them now, not after the whole run
    for key in ("annotations", "categories"):
        if not isinstance(data.get(key), list):
            raise DatasetError(f"{path} has no '{key}' list",
                               hint="COCO-format annotations need 'images', 'annotations' and "
                                    "'categories' (tools/openimages_mlperf.sh writes them)")
    try:
        records = [ImageRecord(int(i["id"]), str(i["file_name"]), int(i["height"]),
                               int(i["width"])) for i in images]
    except (KeyError, TypeError, ValueError) as exc:
        raise DatasetError(f"{path}: an image entry lacks id/file_name/height/width ({exc})",
                           hint="regenerate the annotations with the official script") from exc
    for record in records:
        confined(record.file_name, f"{path}: image {record.id}")
    return records


def image_dir(dataset_dir: Path, first: ImageRecord) -> Path:
    """The folder holding the images: ``validation/data`` or the dataset folder itself."""
    if not dataset_dir.is_dir():
        raise DatasetError(f"dataset directory not found: {dataset_dir}",
                           hint="pass --dataset pointing at the OpenImages MLPerf folder")
    for sub in IMAGE_DIRS:
        if (dataset_dir / sub / first.file_name).is_file():
            return dataset_dir / sub
    raise DatasetError(
        f"image {first.file_name} not found under {dataset_dir}/validation/data or {dataset_dir}",
        hint="download the images with tools/openimages_mlperf.sh, or point --dataset at them",
    )
