"""Submission file helpers: copies that never follow symlinks, output directories."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from mlharness.errors import ConfigError


def copy_file(src: Path, dst: Path) -> None:
    """Copy one regular file (refusing symlinks, so nothing outside the runs is pulled in)."""
    if src.is_symlink() or not src.is_file():
        raise ConfigError(f"not a regular file: {src}",
                          hint="run directories must hold the LoadGen logs as plain files")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.copyfile(src, tmp, follow_symlinks=False)
    os.replace(tmp, dst)


def prepare_output(path: Path, force: bool) -> None:
    """Refuse a non-empty output directory unless ``force``; then clear and create it."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{path} exists and is not a directory", hint="choose another --output")
    if path.is_dir() and any(path.iterdir()):
        if not force:
            raise ConfigError(f"output directory {path} is not empty",
                              hint="choose a new --output, or pass --force to replace it")
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
