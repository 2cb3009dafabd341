"""The calibrated int8 Whisper folder's marker (torch-free: the hf backend checks a model with it
before it imports torch). ``hf_whisper_int8.py`` writes and loads the folder."""

from __future__ import annotations

from pathlib import Path

from mlharness.errors import ConfigError

#: the file that makes a folder a calibrated int8 Whisper (its layers' scales, the recipe)
MARKER = "mlharness_int8.json"


def is_int8_folder(model: Path) -> bool:
    return (Path(model) / MARKER).is_file()


def require_minmax(method: str) -> None:
    if method != "minmax":
        raise ConfigError(f"calibration method {method!r} is not offered for hf (whisper)",
                          hint="the hf quantiser takes min/max ranges: drop --method")
