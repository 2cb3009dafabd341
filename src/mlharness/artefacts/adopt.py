"""``get --from PATH``: take a file or folder the user already has into the cache, verified,
linked or copied — never moved."""

from __future__ import annotations

import os
import shutil
import tarfile
from pathlib import Path
from typing import Callable

from mlharness.artefacts.cache import (download_path, part_path, remove_quietly, stamp_path,
                                       staged_folder, target, write_stamp)
from mlharness.artefacts.catalogue import Artefact
from mlharness.artefacts.digest import algorithm, file_digest, matches, mismatch_text
from mlharness.artefacts.errors import ArtefactError, ChecksumMismatch
from mlharness.artefacts.coco_filter import dump_like_official, safe_annotations
from mlharness.artefacts.coco_zips import PUBLISHED_MD5, coco_safe_from_zips, zips_of
from mlharness.artefacts.layouts import (COCO_ANNOTATIONS, LAYOUT_CHECKS, check_coco_safe,
                                         check_imagenet)
from mlharness.artefacts.unpack import unpack
from mlharness.files import write_text_atomic

OnBytes = Callable[[int], None]


def adopt(artefact: Artefact, source: Path, root: Path, *, aux: Path | None = None,
          on_bytes: OnBytes | None = None) -> Path:
    """Verify ``source`` as ``artefact`` and put it into the cache; returns the cached path.
    ``aux``: caffe's unpacked ILSVRC12 folder, for an ImageNet folder without val_map.txt."""
    source = Path(source).expanduser().absolute()
    if not source.exists():
        raise ArtefactError(f"--from {source}: no such file or folder",
                            hint="give the path of the file or folder you already have")
    if artefact.access == "bundled":
        raise ArtefactError(f"{artefact.name} ships with mlharness; nothing to adopt",
                            hint=f"drop --from: `mlharness get {artefact.name}`")
    if artefact.is_folder:
        return _adopt_folder(artefact, source, root, aux, on_bytes)
    return _adopt_file(artefact, _the_file(artefact, source), root, on_bytes)


def _the_file(artefact: Artefact, source: Path) -> Path:
    """``source`` itself, or the file of the artefact's name inside a folder given."""
    if source.is_file():
        return source
    inside = source / Path(artefact.path).name
    if inside.is_file():
        return inside
    raise ArtefactError(f"--from {source} is a folder without {Path(artefact.path).name}",
                        hint=f"give the file itself ({artefact.name} is one file)")


def _adopt_file(artefact: Artefact, source: Path, root: Path, on_bytes: OnBytes | None) -> Path:
    digest = file_digest(source, algorithm(artefact), on_bytes)
    if not matches(artefact, digest):
        raise ChecksumMismatch(f"--from {source} is not {artefact.name}: "
                               f"{mismatch_text(artefact, digest)}",
                               hint="a different version or a damaged copy: get the published "
                               "file (or drop --from to download it)")
    dest = download_path(artefact, root)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = part_path(dest)
    remove_quietly(part)
    if not _linked(source, part):  # another file system: a copy, verified again
        shutil.copyfile(source, part)
        if file_digest(part, algorithm(artefact)) != digest:
            remove_quietly(part)
            raise ArtefactError(f"copying {source} into the cache changed its bytes",
                                hint="check the disk holding the cache")
    os.replace(part, dest)
    write_stamp(dest, artefact, digest, source=f"--from {source}")
    return dest


def _linked(source: Path, link: Path) -> bool:
    """A hard link (same file system: no copy, and the user's file stays put), if possible."""
    try:
        os.link(source, link)
    except OSError:
        return False
    return True


def _adopt_folder(artefact: Artefact, source: Path, root: Path, aux: Path | None,
                  on_bytes: OnBytes | None = None) -> Path:
    if artefact.layout == "imagenet" and source.is_file() and tarfile.is_tarfile(source):
        return _imagenet_from_archive(artefact, source, root, aux)
    zips = zips_of(source) if artefact.layout == "coco-safe" else None
    if zips is not None:  # COCO's val2017.zip + annotations_trainval2017.zip
        dest = target(artefact, root)
        dest.parent.mkdir(parents=True, exist_ok=True)
        count = coco_safe_from_zips(*zips, dest, artefact.items or 0, on_bytes)
        write_stamp(dest, artefact, "unverified", source=f"--from {source}", images=count,
                    zips_md5={z.name: PUBLISHED_MD5[z.name] for z in zips})
        return dest
    if not source.is_dir():
        raise ArtefactError(f"--from {source}: {artefact.name} is a folder, this is a file",
                            hint="give the folder")
    dest = target(artefact, root)
    dest.parent.mkdir(parents=True, exist_ok=True)
    extra: dict[str, object] = {}
    if artefact.layout == "imagenet":
        expected = artefact.items or 0
        if (source / "val_map.txt").is_file() or aux is None:
            extra["images"] = check_imagenet(source, expected=expected)
            _link(dest, source)
        else:
            extra["images"] = _imagenet_from_aux(source, aux / "val.txt", dest, expected)
    elif artefact.layout == "coco-safe" and (source / "val2017").is_dir():
        extra["images"] = _coco_safe_from_val2017(source, dest, artefact.items or 0)
    elif artefact.layout:  # every other layout is checked where it is, then linked
        checker, counted = LAYOUT_CHECKS[artefact.layout]
        extra[counted] = checker(source, expected=artefact.items or 0)
        _link(dest, source)
    else:
        _link(dest, source)
    write_stamp(dest, artefact, "unverified", source=f"--from {source}", **extra)
    return dest


def _imagenet_from_archive(artefact: Artefact, archive: Path, root: Path,
                           aux: Path | None) -> Path:
    """ILSVRC2012_img_val.tar as the user downloaded it: unpacked into the cache (the archive
    stays where it is), val_map.txt from caffe's val.txt when the archive has none."""
    dest = target(artefact, root)
    if dest.is_symlink():
        dest.unlink()
    unpack(archive, "tar", dest)
    if not (dest / "val_map.txt").is_file() and aux is not None and (aux / "val.txt").is_file():
        shutil.copyfile(aux / "val.txt", dest / "val_map.txt")
    count = check_imagenet(dest, expected=artefact.items or 0)
    write_stamp(dest, artefact, "unverified", source=f"--from {archive}", images=count)
    return dest


def _link(dest: Path, source: Path) -> None:
    """``dest`` becomes a symbolic link to the user's folder (replacing an older one)."""
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    elif dest.is_dir():
        shutil.rmtree(dest)
    tmp = dest.with_name(f".{dest.name}.link")
    remove_quietly(tmp)
    tmp.symlink_to(source, target_is_directory=True)
    os.replace(tmp, dest)
    remove_quietly(stamp_path(dest))


def _imagenet_from_aux(source: Path, val_txt: Path, dest: Path, expected: int) -> int:
    """The user's images without val_map.txt: a cache folder of links to each image plus
    caffe's val.txt as val_map.txt (what MLCommons' automation does), checked as a whole."""
    if not val_txt.is_file():
        raise ArtefactError(f"{val_txt} is missing from the unpacked imagenet-aux",
                            hint="`mlharness get imagenet-aux` again")
    text = val_txt.read_text(encoding="utf-8")
    with staged_folder(dest) as tmp:
        for line in text.splitlines():
            name = line.split()[0] if line.strip() else ""
            if name and (source / name).is_file():
                (tmp / name).symlink_to(source / name)
        write_text_atomic(tmp / "val_map.txt", text)
        return check_imagenet(tmp, expected=expected)


def _coco_safe_from_val2017(source: Path, dest: Path, expected: int) -> int:
    """COCO val2017 as the user has it (``val2017/`` + ``annotations/instances_val2017.json``,
    5,000 images) filtered the official way into a cache folder: the filtered annotation file
    and links to the safe images, checked as a whole (count, licences, files)."""
    import json

    annotations = source / COCO_ANNOTATIONS
    try:
        coco = json.loads(annotations.read_text(encoding="utf-8"))
        subset = safe_annotations(coco)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ArtefactError(f"{annotations}: not COCO's val2017 annotation file ({exc})",
                            hint="unpack annotations_trainval2017.zip into DIR/annotations") from exc
    with staged_folder(dest) as tmp:
        (tmp / "val2017_safe").mkdir()
        (tmp / "annotations").mkdir()
        for image in subset["images"]:
            name = str(image["file_name"])
            if (source / "val2017" / name).is_file():
                (tmp / "val2017_safe" / name).symlink_to(source / "val2017" / name)
        dump_like_official(subset, tmp / COCO_ANNOTATIONS)
        return check_coco_safe(tmp, expected=expected)
