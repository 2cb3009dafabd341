"""File helpers every package shares: atomic writes, file digests, the cache root, TOML reading."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from mlharness.errors import ConfigError, HarnessError


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write via a temporary file in the same directory, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode())


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in blocks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_root(explicit: str | Path | None = None) -> Path:
    """``explicit``, else ``$MLHARNESS_CACHE``, else ``$XDG_CACHE_HOME/mlharness``
    (``~/.cache/mlharness``); always absolute."""
    if explicit:
        return _cache_dir(Path(explicit).expanduser().absolute(), "--cache-dir")
    env = os.environ.get("MLHARNESS_CACHE")
    if env:
        return _cache_dir(Path(env).expanduser().absolute(), "$MLHARNESS_CACHE")
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return _cache_dir((Path(base) / "mlharness").expanduser().absolute(), "the cache directory")


def _cache_dir(path: Path, what: str) -> Path:
    """``path`` unless something other than a directory is there."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{what} {path} is not a directory",
                          hint="point --cache-dir (or $MLHARNESS_CACHE) at a directory")
    return path


def read_text_file(path: Path, what: str = "file",
                   error: type[HarnessError] = ConfigError) -> str:
    """A UTF-8 text file's content; unreadable or not UTF-8 is ``error`` with a hint."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: {what} is not UTF-8 text (byte {exc.start}: "
                    f"{exc.object[exc.start:exc.start + 1]!r})",
                    hint="save it as UTF-8 (e.g. iconv -f latin1 -t utf-8)") from exc
    except IsADirectoryError as exc:
        raise error(f"{path}: {what} is a directory", hint="give the path of the file") from exc
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}",
                    hint="check the path and its permissions") from exc


def read_toml(path: Path, what: str = "config file",
              hint_missing: str = "check the path") -> dict[str, Any]:
    """Parse a TOML file; a missing file, bad encoding or bad syntax is a ConfigError."""
    if not path.is_file():
        raise ConfigError(f"{what} not found: {path}", hint=hint_missing)
    try:
        return tomllib.loads(read_text_file(path, what))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}", hint="fix the TOML syntax") from exc
