"""On-disk feature cache: a compressed ``.npz`` of plain arrays (no pickle), keyed by a hash.

The key covers the bytes of the SQuAD json and of the vocab, the feature parameters and a format
version, so a changed input can never be served stale features.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from mlharness.files import sha256_file
from mlharness.tasks.question_answering.features import FeatureSet

#: bump when the feature layout or the tokeniser changes
CACHE_VERSION = 1


def cache_key(dataset: Path, vocab: Path, params: dict[str, int]) -> str:
    """Hex digest identifying the features of (dataset, vocab, params)."""
    payload = json.dumps({"dataset": sha256_file(dataset), "vocab": sha256_file(vocab),
                          "params": params, "version": CACHE_VERSION}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def cache_path(cache_dir: Path, key: str) -> Path:
    return Path(cache_dir) / "squad" / f"features-{key}.npz"


def save_features(path: Path, features: FeatureSet) -> None:
    """Write atomically: a temporary file in the same folder, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz.tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez_compressed(fh, **{name: getattr(features, name)
                                       for name in FeatureSet.ARRAYS})
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_features(path: Path) -> FeatureSet | None:
    """The cached features, or None when the file is absent or unreadable."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            return FeatureSet(**{name: data[name] for name in FeatureSet.ARRAYS})
    except (OSError, KeyError, ValueError):
        return None
