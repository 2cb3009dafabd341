"""``get --check``: re-hash what the cache holds; a file that is no longer the published one
is moved aside so the next ``get`` fetches it again."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from mlharness.artefacts.cache import (download_path, locked, part_path, read_stamp,
                                       remove_quietly, stamp_path, target, write_stamp)
from mlharness.artefacts.catalogue import Artefact, Catalogue
from mlharness.artefacts.digest import algorithm, file_digest, matches, mismatch_text
from mlharness.artefacts.download import Progress, Report
from mlharness.artefacts.errors import ArtefactError
from mlharness.artefacts.layouts import LAYOUT_CHECKS
from mlharness.artefacts.service import bundled


@dataclass(frozen=True)
class Checked:
    """``check``'s verdict on one artefact."""

    name: str
    state: str  # ok | unverified | bad | missing | partial | bundled
    path: Path
    detail: str = ""


def check(catalogue: Catalogue, root: Path, names: list[str] | None = None,
          report: Report | None = None) -> list[Checked]:
    """Re-hash every cached artefact (or ``names``); a file that is no longer the published
    one is moved to ``<name>.bad`` and reported, so the next ``get`` fetches it again."""
    report = report or (lambda _p: None)
    entries = [catalogue.get(n) for n in names] if names else list(catalogue.artefacts.values())
    results: list[Checked] = []
    for artefact in entries:
        with locked(root, artefact):
            results.append(_check_one(artefact, root, report))
    return results


def _check_one(artefact: Artefact, root: Path, report: Report) -> Checked:
    where = target(artefact, root)
    if artefact.access == "bundled":
        try:
            bundled(artefact, root)
        except ArtefactError as exc:
            return Checked(artefact.name, "bad", where, exc.message)
        return Checked(artefact.name, "bundled", where)
    if artefact.is_folder:
        if not (where.exists() and read_stamp(where)):
            return Checked(artefact.name, "missing", where)
        if artefact.layout:
            checker, items = LAYOUT_CHECKS[artefact.layout]
            try:
                count = checker(where, expected=artefact.items or 0)
            except ArtefactError as exc:
                remove_quietly(stamp_path(where))
                return Checked(artefact.name, "bad", where, exc.message)
            return Checked(artefact.name, "ok", where, f"{count:,} {items}, "
                           f"{artefact.layout} layout checked (no per-item digests published)")
        return Checked(artefact.name, "unverified", where, "a folder: no published digest")
    archive = download_path(artefact, root)
    if not archive.is_file():
        part = part_path(archive)
        if part.exists():
            return Checked(artefact.name, "partial", where,
                           f"{part.stat().st_size:,} bytes of a download; `get` resumes it")
        return Checked(artefact.name, "missing", where)
    size = archive.stat().st_size
    done = 0

    def on_bytes(n: int) -> None:
        nonlocal done
        done += n
        report(Progress(artefact.name, "verify", done, size))

    digest = file_digest(archive, algorithm(artefact), on_bytes)
    if not artefact.verified:
        recorded = (read_stamp(archive) or {}).get("digest")
        if recorded and recorded != digest:
            return Checked(artefact.name, "bad", where,
                           f"changed since it was adopted (sha256 {digest}, was {recorded})")
        return Checked(artefact.name, "unverified", where, f"sha256 {digest} (no published digest)")
    if not matches(artefact, digest):
        os.replace(archive, archive.with_name(archive.name + ".bad"))
        remove_quietly(stamp_path(archive))
        return Checked(artefact.name, "bad", where, f"{mismatch_text(artefact, digest)}; "
                       f"moved to {archive.name}.bad, `mlharness get {artefact.name}` "
                       "fetches it again")
    write_stamp(archive, artefact, digest, source=(read_stamp(archive) or {}).get("source", ""))
    if artefact.unpacked and not (root / artefact.unpacked).is_dir():
        return Checked(artefact.name, "missing", where, "the archive is good, its folder is gone; "
                       f"`mlharness get {artefact.name}` unpacks it")
    return Checked(artefact.name, "ok", where, f"{algorithm(artefact)} {digest}")
