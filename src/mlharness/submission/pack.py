"""``submission.tar.gz``: only regular files and directories inside the tree, relative paths only.

Symlinks are never followed nor stored: every link (even one pointing inside the tree) is left
out and reported, so nothing outside the tree can leak into the archive.
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path, PurePosixPath

from mlharness.errors import ConfigError


def _members(root: Path, top: str) -> tuple[list[Path], list[Path]]:
    """Regular files and dirs under ``root/top`` (walk without following links), and links skipped."""
    keep: list[Path] = []
    links: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root / top, followlinks=False):
        base = Path(dirpath)
        for name in sorted(dirnames):
            p = base / name
            (links if p.is_symlink() else keep).append(p)
        dirnames[:] = sorted(d for d in dirnames if not (base / d).is_symlink())
        for name in sorted(filenames):
            p = base / name
            if p.is_symlink():
                links.append(p)
            elif p.is_file():
                keep.append(p)
    return keep, links


def safe_name(name: str) -> bool:
    """A member name that cannot escape the extraction directory."""
    pure = PurePosixPath(name)
    return not pure.is_absolute() and ".." not in pure.parts and name == pure.as_posix()


def pack(root: Path, tops: list[str], archive: Path) -> list[Path]:
    """Write ``archive`` holding ``root/<top>`` for each top (e.g. ``open``); return skipped links."""
    skipped: list[Path] = []
    tmp = archive.with_name(f".{archive.name}.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for top in tops:
            if (root / top).is_symlink() or not (root / top).is_dir():
                raise ConfigError(f"{root / top} is not a directory in the tree",
                                  hint="lay the tree out with `mlharness submit` first")
            tar.add(root / top, arcname=top, recursive=False)
            members, links = _members(root, top)
            skipped += links
            for path in members:
                name = path.relative_to(root).as_posix()
                if not safe_name(name):
                    raise ConfigError(f"unsafe path in tree: {name}", hint="rename the file")
                tar.add(path, arcname=name, recursive=False)
    os.replace(tmp, archive)
    return skipped


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return f"a symlink to {member.linkname}"
    if member.islnk():
        return f"a hard link to {member.linkname}"
    return "not a regular file or directory"


def unsafe_members(archive: Path) -> list[tuple[str, str]]:
    """``(name, why)`` for every member of ``archive`` that could escape or alias on extraction:
    absolute names, ``..`` components, links, devices. ConfigError if it cannot be read."""
    bad = []
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar.getmembers():
                if not safe_name(member.name):
                    bad.append((member.name, "an absolute path or one with '..'"))
                elif not (member.isfile() or member.isdir()):
                    bad.append((member.name, _kind(member)))
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        detail = (str(exc).splitlines() or [type(exc).__name__])[0].rstrip(":")
        raise ConfigError(f"cannot read the archive {archive}: {detail}",
                          hint="give a .tar.gz written by `mlharness submit`") from exc
    return bad


def verify_archive(archive: Path) -> list[str]:
    """Names in ``archive`` that are unsafe: absolute, with ``..``, or links/devices."""
    return [name for name, _ in unsafe_members(archive)]


def extract_safely(archive: Path, dest: Path) -> None:
    """Extract an archive that ``unsafe_members`` found clean (regular files and dirs only)."""
    with tarfile.open(archive, "r:*") as tar:
        for member in tar.getmembers():
            target = dest / member.name
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                target.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                assert source is not None
                with source, open(target, "wb") as fh:
                    fh.write(source.read())
