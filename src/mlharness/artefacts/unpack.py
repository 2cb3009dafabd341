"""Unpacking a verified archive into its folder, safely and all at once."""

from __future__ import annotations

import shutil
import tarfile
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from mlharness.artefacts.errors import ArtefactError


def _safe(name: str, archive: Path) -> None:
    pure = PurePosixPath(name)
    if pure.is_absolute() or ".." in pure.parts:
        raise ArtefactError(f"{archive}: unsafe member {name!r} (leaves the folder)",
                            hint="the archive is not the published one; delete it and get it again")


def unpack(archive: Path, kind: str, dest: Path) -> None:
    """Extract ``archive`` (zip, or tar: plain or compressed) into ``dest`` via a temporary
    sibling folder, so ``dest`` appears complete or not at all."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        if kind == "zip":
            with zipfile.ZipFile(archive) as zf:
                for name in zf.namelist():
                    _safe(name, archive)
                zf.extractall(tmp)
        else:
            with tarfile.open(archive, "r:*") as tf:
                members = tf.getmembers()
                for member in members:
                    _safe(member.name, archive)
                    if not (member.isfile() or member.isdir()):
                        raise ArtefactError(f"{archive}: member {member.name!r} is a link or "
                                            "device", hint="the archive is not the published one")
                tf.extractall(tmp, members=members, filter="data")
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    except (zipfile.BadZipFile, tarfile.TarError, OSError) as exc:
        raise ArtefactError(f"cannot unpack {archive}: {exc}",
                            hint="delete it and run `mlharness get` again") from exc
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
