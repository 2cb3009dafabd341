"""Where artefacts live in the cache, their verification stamps, locks and status."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import mlharness
from mlharness.artefacts.catalogue import Artefact
from mlharness.files import cache_root, write_json_atomic

SUBDIR = "artefacts"


def artefacts_root(explicit: str | Path | None = None) -> Path:
    """``<cache>/artefacts`` (``--cache-dir``, ``$MLHARNESS_CACHE`` or ``~/.cache/mlharness``)."""
    return cache_root(explicit) / SUBDIR


def target(artefact: Artefact, root: Path) -> Path:
    """Where the usable artefact is: the bundled file, the unpacked folder or the cached file."""
    if artefact.access == "bundled" and artefact.bundled:
        return Path(mlharness.__file__).parent / artefact.bundled
    return root / (artefact.unpacked or artefact.path)


def download_path(artefact: Artefact, root: Path) -> Path:
    """The file a download or adoption writes (the archive for an unpacked artefact)."""
    return root / artefact.path


def part_path(path: Path) -> Path:
    return path.with_name(path.name + ".part")


def stamp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.verified.json")


def write_stamp(path: Path, artefact: Artefact, digest: str, **extra: Any) -> None:
    """Record that ``path`` (as it is now: size and mtime) was verified as ``digest``."""
    st = path.stat()
    write_json_atomic(stamp_path(path), {"artefact": artefact.name, "digest": digest,
                                         "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                                         **extra})


def read_stamp(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(stamp_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def stamp_current(path: Path) -> dict[str, Any] | None:
    """The stamp of ``path`` if the file is still the one that was verified (size and mtime)."""
    stamp = read_stamp(path)
    if stamp is None or not path.exists():
        return None
    if path.is_dir():
        return stamp
    st = path.stat()
    if stamp.get("size") != st.st_size or stamp.get("mtime_ns") != st.st_mtime_ns:
        return None
    return stamp


@contextlib.contextmanager
def locked(root: Path, artefact: Artefact) -> Iterator[None]:
    """One process at a time fetches or adopts an artefact (others wait)."""
    lock_dir = root / ".locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks here; one get at a time is up to the user
        yield
        return
    with (lock_dir / f"{artefact.name}.lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass(frozen=True)
class Status:
    """What the cache holds of one artefact."""

    state: str  # cached | checked | unverified | missing | partial | changed | bundled
    path: Path
    detail: str = ""
    digest: str | None = None

    @property
    def usable(self) -> bool:
        return self.state in ("cached", "checked", "unverified", "bundled")


def status(artefact: Artefact, root: Path) -> Status:
    """The cache's state of ``artefact`` from its stamp (no hashing: ``check`` re-hashes)."""
    where = target(artefact, root)
    if artefact.access == "bundled":
        return Status("bundled" if where.is_file() else "missing", where)
    stamp = stamp_current(where)
    if stamp is not None:
        state = ("cached" if artefact.verified else "checked" if artefact.layout
                 else "unverified")
        return Status(state, where, stamp.get("source", ""), stamp.get("digest"))
    if where.exists() or where.is_symlink():
        return Status("changed", where, "changed since it was verified (or never verified)")
    part = part_path(download_path(artefact, root))
    if part.exists():
        return Status("partial", where, f"{part.stat().st_size:,} bytes downloaded")
    return Status("missing", where)


def remove_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


@contextlib.contextmanager
def staged_folder(dest: Path) -> Iterator[Path]:
    """A fresh ``.<name>.tmp`` folder beside ``dest`` to build a prepared dataset in: removed
    when the block raises, else moved into ``dest``'s place (a link or folder there goes)."""
    tmp = dest.with_name(f".{dest.name}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if dest.is_symlink():
        dest.unlink()
    elif dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
