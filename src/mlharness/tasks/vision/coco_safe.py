"""COCO val2017's licence-safe subset, the YOLO benchmark's dataset: its layout and its filter.

MLCommons keeps the val2017 images whose licence URL names CC BY, CC BY-SA, CC BY-ND, Flickr's
"no known copyright restrictions" or a US-government work (the keywords of
``vision/classification_and_detection/yolo/filter_coco_safe_images.py`` and
``create_safe_annotations.py``): 1,525 of the 5,000. The filtered annotation file keeps COCO's
``info``, ``licenses`` and ``categories``, the safe images in val2017's order and their
annotations (the filter itself: :mod:`mlharness.artefacts.coco_filter`). The published folder (and what those scripts write) is::

    <dir>/val2017_safe/<file_name>          the 1,525 images
    <dir>/annotations/instances_val2017.json  the filtered annotations

(``tools/accuracy-coco.py`` reads ``<coco-dir>/annotations/instances_val2017.json``). A sample's
QSL index is its position in the annotation file's ``images`` list, as both ``yolo_loadgen.py``
and ``accuracy-coco.py`` count.
"""

from __future__ import annotations

from pathlib import Path

from mlharness.artefacts.coco_filter import (SAFE_LICENCE_KEYWORDS, safe_annotations,
                                             safe_images, safe_licence_ids)
from mlharness.errors import DatasetError

__all__ = ["ANNOTATIONS", "IMAGE_DIRS", "SAFE_IMAGES", "SAFE_LICENCE_KEYWORDS", "VAL2017_IMAGES",
           "annotations_path", "image_dir", "safe_annotations", "safe_images", "safe_licence_ids"]

#: the annotation file under the dataset folder (accuracy-coco.py's path)
ANNOTATIONS = Path("annotations") / "instances_val2017.json"
#: where the images may be: the published subset's folder, COCO's own, or the folder itself
IMAGE_DIRS = (Path("val2017_safe"), Path("val2017"), Path("."))
#: the safe subset's size (submission checker constants.py, dataset-size of yolo-95/yolo-99)
SAFE_IMAGES = 1525
#: COCO val2017's size
VAL2017_IMAGES = 5000

def annotations_path(dataset_dir: Path, override: Path | str | None = None) -> Path:
    """The dataset's COCO-format annotation file (``--task-option annotations=`` overrides)."""
    path = Path(override).expanduser() if override else dataset_dir / ANNOTATIONS
    if not path.is_file():
        raise DatasetError(
            f"annotation file not found: {path}",
            hint="the COCO safe subset needs annotations/instances_val2017.json (the filtered "
                 "file); `mlharness get coco-safe --from DIR` builds it from COCO val2017")
    return path


def image_dir(dataset_dir: Path, first_file: str) -> Path:
    """The folder holding the images: ``val2017_safe/``, ``val2017/`` or the folder itself."""
    if not dataset_dir.is_dir():
        raise DatasetError(f"dataset directory not found: {dataset_dir}",
                           hint="pass --dataset pointing at the COCO safe subset's folder")
    for sub in IMAGE_DIRS:
        if (dataset_dir / sub / first_file).is_file():
            return dataset_dir / sub
    raise DatasetError(
        f"image {first_file} not found under {dataset_dir}/val2017_safe, /val2017 or the folder",
        hint="the folder needs val2017_safe/ (the published subset) or val2017/ with the images")
