"""Run directories: one fresh directory per run, atomic JSON writes, nothing overwritten."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mlharness.errors import ConfigError


def new_run_dir(root: Path, benchmark: str, scenario: str, mode: str) -> Path:
    """Create ``root/<benchmark>/<scenario>-<mode or label>-<UTC stamp>[-n]`` and return it."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    parent = root / benchmark
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create {parent}: {exc.strerror}",
                          hint="choose a writable --output-dir") from exc
    for n in range(1000):
        candidate = parent / (f"{scenario}-{mode}-{stamp}" + (f"-{n}" if n else ""))
        try:
            candidate.mkdir()
            return candidate.resolve()
        except FileExistsError:
            continue
    raise ConfigError(f"too many runs named {scenario}-{mode}-{stamp} in {parent}",
                      hint="wait a second or choose another --output-dir")


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON via a temporary file + rename, so readers never see half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, default=str)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
