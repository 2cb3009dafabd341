"""COCO's own val2017 zip files into the licence-safe subset, without unpacking them first.

``mlharness get coco-safe --from DIR`` where DIR holds ``val2017.zip`` and
``annotations_trainval2017.zip`` as cocodataset.org publishes them (or ``--from val2017.zip``
with the annotation zip beside it): both checked against their published md5, the annotation
file read from its zip, filtered the official way (:mod:`.coco_filter`), and only the safe
images extracted, into the cache folder the run reads (``val2017_safe/`` and
``annotations/instances_val2017.json``), checked as a whole before it appears.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path, PurePosixPath
from typing import Callable

from mlharness.artefacts.coco_filter import dump_like_official, safe_annotations
from mlharness.artefacts.digest import file_digest
from mlharness.artefacts.cache import staged_folder
from mlharness.artefacts.errors import ArtefactError
from mlharness.artefacts.layouts import COCO_ANNOTATIONS, check_coco_safe

IMAGES_ZIP = "val2017.zip"
ANNOTATIONS_ZIP = "annotations_trainval2017.zip"
#: the zips' md5 as MLCommons' automation checks them (mlcommons/mlperf-automations
#: script/get-dataset-coco/customize.py; the catalogue's coco-safe entry names it)
PUBLISHED_MD5 = {IMAGES_ZIP: "442b8da7639aecaf257c1dceb8ba8c80",
                 ANNOTATIONS_ZIP: "f4bbac642086de4f52a3fdda2de5fa2c"}
#: where each zip keeps what the subset needs
IMAGES_MEMBER = "val2017/"
ANNOTATIONS_MEMBER = "annotations/instances_val2017.json"


def zips_of(source: Path) -> tuple[Path, Path] | None:
    """``(val2017.zip, annotations_trainval2017.zip)`` when ``source`` is a folder holding both,
    or is ``val2017.zip`` with the other beside it; None when it is neither (ArtefactError when
    only one of the two is there)."""
    if source.is_file() and source.name != IMAGES_ZIP:
        return None
    folder = source.parent if source.is_file() else source
    images, annotations = folder / IMAGES_ZIP, folder / ANNOTATIONS_ZIP
    if images.is_file() and annotations.is_file():
        return images, annotations
    if images.is_file() or annotations.is_file():
        missing = annotations if images.is_file() else images
        raise ArtefactError(f"--from {source}: {missing.name} is not in {folder}",
                            hint=f"put {IMAGES_ZIP} and {ANNOTATIONS_ZIP} (cocodataset.org) in "
                                 "one folder and give that folder")
    return None


def _verified(path: Path, on_bytes: Callable[[int], None] | None) -> None:
    digest = file_digest(path, "md5", on_bytes)
    if digest != PUBLISHED_MD5[path.name]:
        raise ArtefactError(f"{path} is not COCO's {path.name}: md5 {digest}, published "
                            f"{PUBLISHED_MD5[path.name]}",
                            hint="a damaged or different copy: download it again from "
                                 "cocodataset.org")


def coco_safe_from_zips(images_zip: Path, annotations_zip: Path, dest: Path, expected: int,
                        on_bytes: Callable[[int], None] | None = None) -> int:
    """The licence-safe subset built from the two zips into ``dest`` (replacing what was
    there once it is complete and checked); returns its image count."""
    for path in (annotations_zip, images_zip):
        _verified(path, on_bytes)
    try:
        with zipfile.ZipFile(annotations_zip) as zf:
            coco = json.loads(zf.read(ANNOTATIONS_MEMBER))
        subset = safe_annotations(coco)
    except KeyError as exc:
        raise ArtefactError(f"{annotations_zip}: no {ANNOTATIONS_MEMBER} inside ({exc})",
                            hint="use COCO's annotations_trainval2017.zip") from exc
    except (zipfile.BadZipFile, ValueError, TypeError, OSError) as exc:
        raise ArtefactError(f"{annotations_zip}: cannot read {ANNOTATIONS_MEMBER} ({exc})",
                            hint="download it again from cocodataset.org") from exc
    try:
        with staged_folder(dest) as tmp, zipfile.ZipFile(images_zip) as zf:
            (tmp / "val2017_safe").mkdir()
            (tmp / "annotations").mkdir()
            present = set(zf.namelist())
            for image in subset["images"]:
                name = str(image["file_name"])
                if PurePosixPath(name).name != name or name in ("", ".", ".."):
                    raise ArtefactError(f"{annotations_zip}: image name {name!r} is not a "
                                        "file name", hint="use COCO's own annotation file")
                member = IMAGES_MEMBER + name
                if member in present:
                    with zf.open(member) as src, open(tmp / "val2017_safe" / name, "wb") as out:
                        shutil.copyfileobj(src, out)
            dump_like_official(subset, tmp / COCO_ANNOTATIONS)
            return check_coco_safe(tmp, expected=expected)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ArtefactError(f"cannot extract the safe images from {images_zip}: {exc}",
                            hint="check the disk holding the cache, or download the zip "
                                 "again") from exc
