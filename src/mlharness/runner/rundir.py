"""Run directories: one fresh directory per run, atomic JSON writes, nothing overwritten."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

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


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
