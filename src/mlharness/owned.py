"""Directories mlharness owns: marked when created, and the only non-empty ones ``--force`` may
delete.

A directory may be replaced when it is empty, or when it carries mlharness's marker file and
holds nothing but the files that marker lists (the marker names exactly what mlharness wrote;
one that lists nothing, e.g. left by a command that failed before it could seal, makes every
file foreign). A directory of a well-known official shape that carries no marker (a compliance
TEST0X directory) may be replaced when every file in it matches that shape, path by path. It is never
replaced when it is the working directory or one of its parents, the home directory, a
filesystem root, or a git work tree. Refusals are ConfigErrors that say what would have been
deleted.
"""

from __future__ import annotations

import json
import os
import shutil
from fnmatch import fnmatch
from pathlib import Path
from typing import Iterable

from mlharness import __version__
from mlharness.errors import ConfigError

MARKER = ".mlharness-owned"


def mark(path: Path, kind: str, seal: bool = False) -> None:
    """Record that mlharness created ``path`` for ``kind`` (e.g. "submission") and the files it
    wrote there: none when it is just created; with ``seal``, every file it holds now (call it
    right after mlharness wrote them, also when the command fails half way), so that files
    added later by someone else are never deleted by ``--force``. Written atomically."""
    files = sorted(p.relative_to(path).as_posix() for p in _files(path)
                   if p.name != MARKER) if seal else []
    data = {"created_by": "mlharness", "kind": kind, "version": __version__, "files": files}
    tmp = path / f"{MARKER}.tmp"
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path / MARKER)


def _marker(path: Path) -> dict:
    try:
        data = json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def marked_kind(path: Path) -> str | None:
    """The ``kind`` of a directory mlharness marked, or None."""
    return _marker(path).get("kind")


def _files(path: Path) -> list[Path]:
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
        base = Path(dirpath)
        out += [base / n for n in filenames]
        out += [base / d for d in dirnames if (base / d).is_symlink()]
    return out


def _sample(paths: Iterable[Path], root: Path, n: int = 3) -> str:
    items = sorted(str(p.relative_to(root)) for p in paths)
    more = f" and {len(items) - n} more" if len(items) > n else ""
    return ", ".join(items[:n]) + more


def protected_reason(path: Path) -> str | None:
    """Why ``path`` must never be deleted whatever it holds, or None."""
    real = path.resolve()
    cwd = Path.cwd().resolve()
    if real == cwd:
        return "it is the working directory"
    if real in cwd.parents:
        return "it contains the working directory"
    if real == Path.home().resolve() or real in Path.home().resolve().parents:
        return "it is your home directory or contains it"
    if real == Path(real.anchor):
        return "it is a filesystem root"
    if (real / ".git").exists():
        return "it is a git work tree"
    return None


def replace_owned(path: Path, kind: str, allowed: Iterable[str], flag: str = "--output",
                  force: bool = False, marked: bool = True, dry_run: bool = False) -> str | None:
    """Make ``path`` an empty directory, deleting it first only if mlharness may.

    ``allowed``: glob patterns of the relative paths mlharness writes in such a directory
    (``performance/run_1/*.txt``). ``marked``: whether the directory carries mlharness's marker,
    whose file list then decides; without one (a directory of a well-known official shape, such
    as a compliance TEST0X directory) every file must match ``allowed``. Returns a sentence saying
    what was deleted, or None when nothing was. ``dry_run``: only raise the refusals.
    """
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise ConfigError(f"{flag} {path} exists and is not a directory",
                          hint=f"choose another {flag}")
    if path.is_dir() and any(p.name != MARKER for p in path.iterdir()):
        reason = protected_reason(path)
        if reason:
            top = list(path.iterdir())
            raise ConfigError(f"refusing to replace {path}: {reason} (it holds "
                              f"{_sample(top, path)})",
                              hint=f"choose a new {flag}, e.g. a subdirectory")
        files = [p for p in _files(path) if p != path / MARKER]
        if not force:
            raise ConfigError(f"{flag} {path} is not empty ({len(files)} files)",
                              hint=f"choose a new {flag}, or pass --force to replace a directory "
                                   f"mlharness wrote")
        if marked and marked_kind(path) != kind:
            raise ConfigError(f"refusing to replace {path}: mlharness did not create it "
                              f"(no {kind} marker); it holds {len(files)} files, e.g. "
                              f"{_sample(files, path)}",
                              hint=f"choose a new {flag}, or delete it yourself if you are sure")
        foreign = _foreign(path, files, allowed, marked)
        if foreign:
            raise ConfigError(f"refusing to replace {path}: it holds files mlharness did not write "
                              f"({_sample(foreign, path)})",
                              hint=f"move them away, or choose a new {flag}")
        done = f"replaced {path} ({len(files)} files written earlier by mlharness)"
        if dry_run:
            return done
        shutil.rmtree(path)
    else:
        done = None
    if dry_run:
        return done
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create {flag} {path}: {exc.strerror}",
                          hint=f"choose a writable {flag}") from exc
    if marked:
        mark(path, kind)
    return done


def _foreign(path: Path, files: list[Path], allowed: Iterable[str], marked: bool) -> list[Path]:
    """The files under ``path`` that mlharness cannot show it wrote."""
    def rel(p: Path) -> str:
        return p.relative_to(path).as_posix()

    candidates = [p for p in files if p.name != MARKER]
    if marked:
        listed = _marker(path).get("files")
        known = set(listed) if isinstance(listed, list) else set()
        return [p for p in candidates if rel(p) not in known]
    patterns = list(allowed)
    return [p for p in candidates if not any(fnmatch(rel(p), pat) for pat in patterns)]
