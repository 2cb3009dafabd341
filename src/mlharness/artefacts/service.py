"""``get``: bring an artefact into the cache — adopt, keep a verified copy, download, unpack
or prepare it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from mlharness.artefacts.adopt import adopt
from mlharness.artefacts.cache import (download_path, locked, read_stamp, remove_quietly,
                                       stamp_current, stamp_path, status, target, write_stamp)
from mlharness.artefacts.catalogue import Artefact, Catalogue
from mlharness.artefacts.digest import algorithm, file_digest, matches, mismatch_text
from mlharness.artefacts.download import Policy, Progress, Report, fetch
from mlharness.artefacts.errors import ArtefactError
from mlharness.artefacts.prepare import prepare_openimages
from mlharness.artefacts.unpack import unpack


@dataclass(frozen=True)
class Outcome:
    """What ``get`` did for one artefact and where it is now."""

    name: str
    path: Path
    action: str  # cached | downloaded | adopted | bundled | unpacked | prepared
    digest: str | None
    verified: bool


def get(artefact: Artefact, root: Path, *, source: Path | None = None,
        mirror: str | None = None, policy: Policy | None = None,
        report: Report | None = None, catalogue: Catalogue | None = None) -> Outcome:
    """Make ``artefact`` usable from the cache: adopt ``source``, or keep a verified copy, or
    download (resume, retry, verify) and unpack it. Nothing is fetched when it is cached."""
    report = report or (lambda _p: None)
    with locked(root, artefact):
        if source is not None:
            return _adopted(artefact, root, source, report, catalogue, mirror, policy)
        if artefact.access == "bundled":
            return bundled(artefact, root)
        current = status(artefact, root)
        if current.usable:
            return Outcome(artefact.name, current.path, "cached", current.digest,
                           artefact.verified)
        if artefact.access == "prepare":
            return _prepared(artefact, root, mirror, policy, report, catalogue)
        if artefact.access in ("user", "gated"):
            raise ArtefactError(f"{artefact.name} is not downloaded by mlharness "
                                f"({artefact.licence})", hint=artefact.obtain or "")
        archive = download_path(artefact, root)
        action = "cached"
        digest = _reverified(artefact, archive, report)
        if digest is None:
            digest = fetch(artefact, archive, mirror=mirror, policy=policy, report=report)
            action = "downloaded"
        if artefact.unpack and artefact.unpacked:
            _unpack(artefact, root, archive, digest)
            action = "unpacked" if action == "cached" else action
        return Outcome(artefact.name, target(artefact, root), action, digest, True)


def _prepared(artefact: Artefact, root: Path, mirror: str | None, policy: Policy | None,
              report: Report, catalogue: Catalogue | None) -> Outcome:
    """A dataset built from its required artefacts plus one download per item."""
    if catalogue is None:
        raise ArtefactError(f"{artefact.name} is prepared from {', '.join(artefact.requires)}",
                            hint="pass the catalogue")
    needed = [get(catalogue.get(name), root, mirror=mirror, policy=policy, report=report,
                  catalogue=catalogue) for name in artefact.requires]
    annotations = needed[0].path / "openimages-mlperf.json"
    folder = prepare_openimages(artefact, root, annotations, mirror=mirror, policy=policy,
                                report=report)
    return Outcome(artefact.name, folder, "prepared", None, False)


def _reverified(artefact: Artefact, path: Path, report: Report) -> str | None:
    """The digest of a file already at ``path`` that is the published one (re-stamped), or
    None; a wrong file is moved aside to ``<name>.bad`` so a download can take its place."""
    stamp = stamp_current(path)
    if stamp is not None:
        return str(stamp.get("digest"))
    if not path.is_file():
        return None
    report(Progress(artefact.name, "verify", 0, path.stat().st_size, message="re-verifying"))
    digest = file_digest(path, algorithm(artefact))
    if matches(artefact, digest):
        write_stamp(path, artefact, digest, source=(read_stamp(path) or {}).get("source", ""))
        return digest
    os.replace(path, path.with_name(path.name + ".bad"))
    remove_quietly(stamp_path(path))
    report(Progress(artefact.name, "retry", message=f"cached file refused: "
                    f"{mismatch_text(artefact, digest)}; moved to {path.name}.bad"))
    return None


def _unpack(artefact: Artefact, root: Path, archive: Path, digest: str) -> None:
    folder = root / str(artefact.unpacked)
    stamp = stamp_current(folder)
    if stamp is not None and stamp.get("digest") == digest:
        return
    unpack(archive, str(artefact.unpack), folder)
    write_stamp(folder, artefact, digest, source=f"unpacked from {archive.name}")


def bundled(artefact: Artefact, root: Path) -> Outcome:
    """A file shipped inside mlharness, checked against its published digest."""
    path = target(artefact, root)
    if not path.is_file():
        raise ArtefactError(f"{artefact.name}: {path} is missing from the installed package",
                            hint="reinstall mlharness")
    digest = file_digest(path, algorithm(artefact))
    if not matches(artefact, digest):
        raise ArtefactError(f"{artefact.name}: the packaged {path.name} is damaged: "
                            f"{mismatch_text(artefact, digest)}", hint="reinstall mlharness")
    return Outcome(artefact.name, path, "bundled", digest, True)


def _adopted(artefact: Artefact, root: Path, source: Path, report: Report,
             catalogue: Catalogue | None, mirror: str | None = None,
             policy: Policy | None = None) -> Outcome:
    if not Path(source).expanduser().exists():  # before anything else is fetched for it
        raise ArtefactError(f"--from {source}: no such file or folder",
                            hint=f"give the path of your copy of {artefact.name}")
    aux = None
    if artefact.layout == "imagenet" and catalogue and "imagenet-aux" in catalogue.artefacts:
        aux_entry = catalogue.artefacts["imagenet-aux"]
        if status(aux_entry, root).usable:
            aux = target(aux_entry, root)
        elif not (Path(source).expanduser() / "val_map.txt").is_file():
            # the images as image-net.org ships them carry no labels: caffe's val.txt does
            aux = get(aux_entry, root, mirror=mirror, policy=policy, report=report).path
    done = 0

    def on_bytes(n: int) -> None:
        nonlocal done
        done += n
        report(Progress(artefact.name, "verify", done, None, message=f"verifying {source}"))

    path = adopt(artefact, source, root, aux=aux, on_bytes=on_bytes)
    stamp = read_stamp(path) or {}
    digest = stamp.get("digest")
    if artefact.unpack and artefact.unpacked and digest:
        _unpack(artefact, root, path, str(digest))
        path = target(artefact, root)
    return Outcome(artefact.name, path, "adopted", str(digest) if digest else None,
                   artefact.verified)
