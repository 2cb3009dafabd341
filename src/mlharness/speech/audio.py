"""Whisper's audio as the reference loads it (``speech2text/QSL.py``: ``librosa.load(path,
sr=16000)``): float32 samples read through libsndfile (``soundfile``, librosa's reader), the
channels averaged to mono; the clips are 16 kHz already, so nothing is resampled (a file at
another rate is refused rather than resampled differently). The model pads each clip to 30 s
(``SAMPLES_30S``) when it computes its log-mel features."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import numpy as np

from mlharness.errors import ConfigError, DatasetError

SAMPLE_RATE = 16_000
#: whisper's input window: 30 s at 16 kHz (the feature extractor's n_samples)
SAMPLES_30S = 30 * SAMPLE_RATE


def _soundfile():
    try:
        import soundfile
    except ImportError as exc:  # the extra is missing, or libsndfile with it
        raise ConfigError(f"reading whisper's audio needs soundfile ({exc})",
                          "pip install 'mlharness[whisper]'") from exc
    return soundfile


def load(path: Path) -> np.ndarray:
    """The float32 mono samples of an audio file at 16 kHz (what ``librosa.load(path,
    sr=16000)[0]`` returns for such a file)."""
    sf = _soundfile()
    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except (OSError, RuntimeError) as exc:  # soundfile raises LibsndfileError (a RuntimeError)
        raise DatasetError(f"cannot read audio {path}: {exc}",
                           "the clips are 16 kHz WAV (or FLAC) files") from exc
    if rate != SAMPLE_RATE:
        raise DatasetError(f"{path} is sampled at {rate} Hz; whisper's clips are {SAMPLE_RATE} Hz",
                           "resample it to 16 kHz first (the reference's clips all are)")
    return _mono(data)


def write(path: Path, samples: np.ndarray, rate: int = SAMPLE_RATE) -> None:
    """Write ``samples`` as ``soundfile.write`` does by the file's suffix (16-bit PCM for WAV and
    FLAC), as the reference's repacking writes its clips."""
    _soundfile().write(str(path), samples, rate)


def decode(source: BinaryIO | Path) -> np.ndarray:
    """:func:`load` of an open file or its bytes (``io.BytesIO``): a clip held in memory."""
    sf = _soundfile()
    try:
        data, rate = sf.read(source, dtype="float32", always_2d=True)
    except (OSError, RuntimeError) as exc:
        raise DatasetError(f"cannot decode a clip's audio: {exc}",
                           "the clips are 16 kHz WAV (or FLAC) files") from exc
    if rate != SAMPLE_RATE:
        raise DatasetError(f"a clip is sampled at {rate} Hz; whisper's clips are {SAMPLE_RATE} Hz",
                           "resample it to 16 kHz first (the reference's clips all are)")
    return _mono(data)


def _mono(data: np.ndarray) -> np.ndarray:
    if data.shape[1] == 1:
        return np.ascontiguousarray(data[:, 0])
    return data.mean(axis=1, dtype=np.float32)  # librosa.to_mono: the channels' mean
