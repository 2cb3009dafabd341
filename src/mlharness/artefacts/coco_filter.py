"""The official licence filter of COCO val2017 (the YOLO benchmark's safe subset).

MLCommons keeps the val2017 images whose licence URL contains one of the keywords of
``vision/classification_and_detection/yolo/filter_coco_safe_images.py`` (and
``create_safe_annotations.py``); the filtered annotation file keeps COCO's ``info``,
``licenses`` and ``categories``, the safe images in file order and their annotations, written
with ``json.dump``'s defaults.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: a licence URL containing one of these (lower-cased) is safe (filter_coco_safe_images.py)
SAFE_LICENCE_KEYWORDS = (
    "creativecommons.org/licenses/by/",
    "creativecommons.org/licenses/by-sa/",
    "creativecommons.org/licenses/by-nd",
    "flickr.com/commons/usage",
    "www.usa.gov",
)


def safe_licence_ids(coco: dict[str, Any]) -> set[Any]:
    """The ids of ``coco["licenses"]`` whose URL names a safe licence."""
    return {lic.get("id") for lic in coco.get("licenses", [])
            if any(k in str(lic.get("url", "")).lower() for k in SAFE_LICENCE_KEYWORDS)}


def safe_images(coco: dict[str, Any]) -> list[dict[str, Any]]:
    """The images of a COCO annotation dict under a safe licence, in file order."""
    safe = safe_licence_ids(coco)
    return [img for img in coco["images"] if img.get("license") in safe]


def safe_annotations(coco: dict[str, Any]) -> dict[str, Any]:
    """The filtered annotation dict, laid out as ``create_safe_annotations.py`` writes it."""
    images = safe_images(coco)
    ids = {img["id"] for img in images}
    return {
        "info": coco.get("info", {}),
        "licenses": coco.get("licenses", []),
        "images": images,
        "annotations": [a for a in coco["annotations"] if a["image_id"] in ids],
        "categories": coco.get("categories", []),
    }


def dump_like_official(data: dict[str, Any], path: Path) -> None:
    """Write ``data`` as the official script does (``json.dump`` with its defaults)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    tmp.replace(path)
