"""Folder layouts checked when a dataset is adopted: what the official tools expect."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from mlharness.artefacts.coco_filter import safe_licence_ids
from mlharness.artefacts.errors import ArtefactError
from mlharness.errors import DatasetError

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


#: KiTS19 as github.com/neheller/kits19 downloads it (``starter_code/get_imaging.py``):
#: ``data/case_XXXXX/imaging.nii.gz``, and ``segmentation.nii.gz`` for the 210 training cases
#: (the 3D-UNet inference cases are among them; the reference copies case_00185 to case_00400)
KITS19_LABELLED = 210


def check_kits19(folder: Path, *, expected: int = 0) -> int:
    """Check a KiTS19 folder (or the kits19 clone holding ``data/``): every labelled case
    ``case_00000`` .. ``case_00209`` has its imaging and segmentation; returns the case count
    (``expected`` is not used: the unlabelled test cases may be there or not). The task checks
    the 43 inference cases again when it runs."""
    data = folder / "data" if not any(folder.glob("case_*")) else folder
    missing = [f"case_{n:05d}" for n in range(KITS19_LABELLED)
               if not ((data / f"case_{n:05d}" / "imaging.nii.gz").is_file()
                       and (data / f"case_{n:05d}" / "segmentation.nii.gz").is_file())]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise ArtefactError(f"{data}: {len(missing)} KiTS19 case(s) lack imaging.nii.gz or "
                            f"segmentation.nii.gz: {', '.join(missing[:3])}{more}",
                            hint="download with github.com/neheller/kits19 "
                                 "(python -m starter_code.get_imaging) and give its data/ folder")
    return sum(1 for p in data.glob("case_*/imaging.nii.gz"))


#: the COCO safe subset's annotation file (tools/accuracy-coco.py's path under --coco-dir)
COCO_ANNOTATIONS = "annotations/instances_val2017.json"


def check_coco_safe(folder: Path, *, expected: int,
                    on_count: Callable[[int, int], None] | None = None) -> int:
    """Check a COCO safe-subset folder (``annotations/instances_val2017.json`` +
    ``val2017_safe/``): ``expected`` images listed, each under a safe licence (the official
    filter's keywords) and present; returns the image count."""
    import json

    annotations = folder / COCO_ANNOTATIONS
    if not annotations.is_file():
        raise ArtefactError(f"{folder}: no {COCO_ANNOTATIONS}",
                            hint="give the published subset's folder, or COCO val2017's "
                                 "(val2017/ + annotations/) to build it from")
    try:
        coco = json.loads(annotations.read_text(encoding="utf-8"))
        images = coco["images"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ArtefactError(f"{annotations}: not a COCO annotation file ({exc})",
                            hint="use the subset's instances_val2017.json") from exc
    if expected and len(images) != expected:
        raise ArtefactError(f"{annotations}: {len(images):,} images listed, the licence-safe "
                            f"subset has {expected:,}", hint="use the complete subset")
    safe = safe_licence_ids(coco)
    for number, image in enumerate(images, 1):
        if image.get("license") not in safe:
            raise ArtefactError(f"{annotations}: image {image.get('file_name')} is not under a "
                                "safe licence", hint="this is not the licence-safe subset")
        name = str(image.get("file_name", ""))
        if not any((folder / sub / name).is_file() for sub in ("val2017_safe", "val2017", ".")):
            raise ArtefactError(f"{folder}: image {name} is missing",
                                hint="copy the whole subset (val2017_safe/)")
        if on_count and number % 500 == 0:
            on_count(number, len(images))
    return len(images)


def check_librispeech_repack(folder: Path, *, expected: int) -> int:
    """Check a whisper dataset folder (the reference's DATA_DIR): ``dev-all-repack.json``
    keeps ``expected`` clips of at most 30 s, as the reference's manifest reader keeps them,
    and every clip's audio is in ``dev-all-repack/``; returns the clip count."""
    # lazy: mlharness.speech reads audio (soundfile, the whisper extra); `get` lists without it
    from mlharness.speech.manifest import MANIFEST_NAME, read_manifest, relocated

    manifest = folder / MANIFEST_NAME
    if not manifest.is_file():
        raise ArtefactError(f"{folder}: no {MANIFEST_NAME}",
                            hint="give the folder download_dataset.sh (or the MLCommons "
                            "preprocessed download) wrote, or `mlharness get "
                            "whisper-librispeech` builds one")
    try:
        clips = relocated(read_manifest(manifest, folder)).clips
    except DatasetError as exc:
        raise ArtefactError(f"{folder}: {exc.message}", hint=exc.hint) from None
    if expected and len(clips) != expected:
        raise ArtefactError(f"{manifest}: {len(clips):,} clips of at most 30 s, the whisper "
                            f"dataset has {expected:,}",
                            hint="use the complete dev-clean + dev-other repack")
    return len(clips)


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


#: each folder layout's check (``folder, expected=`` -> the count) and what it counts
LAYOUT_CHECKS: dict[str, tuple[Callable[..., int], str]] = {
    "imagenet": (check_imagenet, "images"), "openimages": (check_openimages, "images"),
    "kits19": (check_kits19, "cases"), "coco-safe": (check_coco_safe, "images"),
    "librispeech-repack": (check_librispeech_repack, "clips"),
    "hf-dataset": (check_hf_dataset, "rows")}