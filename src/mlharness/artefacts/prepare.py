"""Datasets built as the official tools build them: the OpenImages MLPerf subset is its
verified annotation file plus every image it lists, fetched in parallel from the public bucket
the official script (tools/openimages.py) reads, each checked against its annotation; the
whisper dataset is LibriSpeech dev-clean + dev-other (md5-verified archives) repacked into
clips of at most 30 s as speech2text/download_dataset.sh repacks them (speech/repack.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from threading import Lock

from mlharness.artefacts.cache import remove_quietly, write_stamp
from mlharness.artefacts.catalogue import Artefact
from mlharness.artefacts.download import Policy, Progress, Report, Transient, fetch_file
from mlharness.artefacts.errors import DownloadFailed
from mlharness.artefacts.layouts import (OPENIMAGES_ANNOTATIONS, OPENIMAGES_IMAGES,
                                         check_librispeech_repack, check_openimages,
                                         openimages_images)
from mlharness.errors import DatasetError

#: parallel image downloads (the official script uses a thread pool too)
WORKERS = 8


def prepare_openimages(artefact: Artefact, root: Path, annotations: Path, *,
                       mirror: str | None = None, policy: Policy | None = None,
                       report: Report | None = None, workers: int = WORKERS) -> Path:
    """Build ``<cache>/<artefact.path>`` from the annotation file: the images already there
    are kept (each was checked before it was renamed into place), the rest are downloaded."""
    report = report or (lambda _p: None)
    folder = root / artefact.path
    images = openimages_images(annotations)
    (folder / OPENIMAGES_ANNOTATIONS).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(annotations, folder / OPENIMAGES_ANNOTATIONS)
    data = folder / OPENIMAGES_IMAGES
    data.mkdir(parents=True, exist_ok=True)
    todo = [image for image in images if not (data / image["file_name"]).is_file()]
    total = len(images)
    done = total - len(todo)
    lock = Lock()
    failures: list[str] = []
    report(Progress(artefact.name, "items", done, total, message="images"))

    def one(image: dict) -> None:
        nonlocal done
        name = image["file_name"]
        if mirror:
            urls = [f"{mirror.rstrip('/')}/{artefact.path}/{OPENIMAGES_IMAGES}/{name}"]
        else:
            urls = [str(artefact.item_url).format(file=name)]

        def verify(part: Path, url: str) -> str:
            return _image_checked(part, int(image["width"]), int(image["height"]))

        try:
            fetch_file(artefact.name, f"{artefact.path}/{OPENIMAGES_IMAGES}/{name}", urls,
                       data / name, verify, policy=policy, same_origin=bool(mirror))
        except DownloadFailed as exc:
            with lock:
                failures.append(exc.message)
            return
        with lock:
            done += 1
            report(Progress(artefact.name, "items", done, total, message="images"))

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(one, todo))
    if failures:
        raise DownloadFailed(f"{len(failures):,} of {total:,} images could not be downloaded; "
                             f"first: {failures[0]}",
                             hint=f"run the same `mlharness get` again: the {done:,} images "
                             "already there are kept")
    count = check_openimages(folder, expected=artefact.items or 0)
    write_stamp(folder, artefact, "unverified", source="prepared", images=count)
    return folder


def _image_checked(part: Path, width: int, height: int) -> str:
    """'WxH' of a JPEG that decodes with its annotated size; otherwise the part is deleted
    and the download retried."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(part) as image:
            size = image.size
            image.verify()
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        remove_quietly(part)
        raise Transient(f"not a readable image ({exc})") from None
    if size != (width, height):
        remove_quietly(part)
        raise Transient(f"image is {size[0]}x{size[1]}, its annotation says {width}x{height}")
    return f"{width}x{height}"


def prepare_librispeech(artefact: Artefact, root: Path, unpacked: list[Path], *,
                        report: Report | None = None) -> Path:
    """Build ``<cache>/<artefact.path>`` (``dev-all-repack.json`` and ``dev-all-repack/``)
    from the unpacked LibriSpeech archives (each holding ``LibriSpeech/<subset>/``), in a
    temporary sibling renamed into place once checked: complete or not at all."""
    # lazy: mlharness.speech reads audio (soundfile, the whisper extra); `get` lists without it
    from mlharness.speech import repack

    report = report or (lambda _p: None)
    folder = root / artefact.path
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        librispeech = work / "LibriSpeech"  # one root holding every subset, by links
        librispeech.mkdir()
        for archive in unpacked:
            if not (archive / "LibriSpeech").is_dir():
                raise DownloadFailed(f"{artefact.name}: {archive} holds no LibriSpeech/ folder",
                                     hint="the archive is not the published one: `mlharness "
                                     "get --check`, then get it again")
            for subset in sorted((archive / "LibriSpeech").iterdir()):
                if subset.is_dir():
                    os.symlink(subset, librispeech / subset.name, target_is_directory=True)

        def progress(done: int, total: int, _label: str) -> None:
            report(Progress(artefact.name, "items", done, total, message="chapters repacked"))

        out = work / "out"
        try:
            repack.repack(librispeech, out, progress)
        except DatasetError as exc:
            raise DownloadFailed(f"{artefact.name}: {exc.message}", hint=exc.hint) from None
        count = check_librispeech_repack(out, expected=artefact.items or 0)
        if folder.is_symlink() or folder.is_file():
            folder.unlink()
        elif folder.exists():
            shutil.rmtree(folder)
        out.rename(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_stamp(folder, artefact, "unverified", source="prepared", clips=count)
    return folder
