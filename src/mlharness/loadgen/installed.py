"""What the installed LoadGen enforces: the mlperf.conf compiled into its binary.

LoadGen embeds mlperf.conf at build time (``loadgen/setup.py`` generates ``mlperf_conf.h``) and
only that copy may set the seeds. We read it from the extension module's bytes, without importing
LoadGen, so a preflight costs milliseconds and never touches LoadGen's process-wide state.
"""

from __future__ import annotations

import importlib.util
import re
from functools import lru_cache
from importlib import metadata
from pathlib import Path

SEED_KEYS = ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed")
_LINE = re.compile(rb"(?m)^([A-Za-z0-9_.*-]+\.(?:\*|SingleStream|MultiStream|Server|Offline|"
                   rb"Interactive)\.[A-Za-z0-9_]+)[ \t]*=[ \t]*([^\s#\x00]+)")


def loadgen_version() -> str | None:
    """The installed ``mlcommons-loadgen`` version, or None."""
    try:
        return metadata.version("mlcommons-loadgen")
    except metadata.PackageNotFoundError:
        return None


def loadgen_binary() -> Path | None:
    spec = importlib.util.find_spec("mlperf_loadgen")
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin)


@lru_cache(maxsize=None)
def embedded_conf(binary: Path | None = None) -> dict[str, str]:
    """``{"model.scenario.key": value}`` from the mlperf.conf embedded in the LoadGen binary
    (empty if LoadGen is not installed or the text cannot be found)."""
    path = binary or loadgen_binary()
    if path is None or not path.is_file():
        return {}
    out: dict[str, str] = {}
    for m in _LINE.finditer(path.read_bytes()):
        out.setdefault(m.group(1).decode(), m.group(2).decode())
    return out


def installed_seeds(binary: Path | None = None) -> dict[str, int] | None:
    """The three seeds the installed LoadGen will use, or None if they cannot be read."""
    conf = embedded_conf(binary)
    seeds = {}
    for key in SEED_KEYS:
        value = conf.get(f"*.*.{key}")
        if value is None or not value.isdigit():
            return None
        seeds[key] = int(value)
    return seeds
