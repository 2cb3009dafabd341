"""Submission file helpers: copies that never follow symlinks, output directories."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from mlharness.errors import ConfigError
from mlharness.owned import mark, replace_owned


def copy_file(src: Path, dst: Path) -> None:
    """Copy one regular file (refusing symlinks, so nothing outside the runs is pulled in)."""
    if src.is_symlink() or not src.is_file():
        raise ConfigError(f"not a regular file: {src}",
                          hint="run directories must hold the LoadGen logs as plain files")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.copyfile(src, tmp, follow_symlinks=False)
    os.replace(tmp, dst)


#: top-level names ``submit`` writes in its --output (besides the marker)
TREE_NAMES = ("open", "closed", "network", "submission.tar.gz", "summary.*")


def prepare_output(path: Path, force: bool, dry_run: bool = False) -> str | None:
    """Create the (empty, marked) output directory. A non-empty one is replaced only with
    ``force`` and only if an earlier ``submit`` wrote it (see mlharness.owned); returns what
    was replaced, if anything. ``dry_run`` only checks (refusals come before any other work)."""
    return replace_owned(path, "submission", TREE_NAMES, "--output", force, dry_run=dry_run)


def seal_output(path: Path) -> None:
    """Record the files of the finished tree: only those may be deleted by a later --force."""
    mark(path, "submission", seal=True)
