"""The whisper dataset's manifest as the reference reads it (``speech2text/manifest.py``, called
by ``QSL.py`` and ``accuracy_eval.py`` with ``max_duration`` 30 s): a JSON list of clips, each
with its ``files`` (``fname``, ``speed``), ``original_duration`` and ``transcript``. A clip longer
than the maximum or without a text transcript is left out; the sample index of a clip is its
position among those kept. An audio path is the clip's speed-1 file joined to the data folder.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from mlharness.errors import DatasetError

#: seconds; longer clips are left out (QSL.py and accuracy_eval.py: MAX_DURATION, default 30.0)
MAX_DURATION = 30.0
#: the manifest file name the reference's dataset scripts write (download_dataset.sh)
MANIFEST_NAME = "dev-all-repack.json"
#: the folder of the repacked clips beside it
CLIPS_FOLDER = "dev-all-repack"


class ManifestFile(BaseModel):
    """One audio file of a clip (the reference keeps the speed-1 one)."""

    model_config = ConfigDict(extra="allow")
    fname: str
    speed: float
    duration: float


class ManifestEntry(BaseModel):
    """One clip as the manifest lists it."""

    model_config = ConfigDict(extra="allow")
    files: list[ManifestFile]
    original_duration: float
    transcript: object = None
    text_filepath: str | None = None


@dataclass(frozen=True)
class Clip:
    """A sample: its audio file, duration (s) and reference transcript."""

    audio: Path
    duration: float
    transcript: str


@dataclass(frozen=True)
class Manifest:
    """The clips a manifest keeps, in sample order, and the seconds it left out."""

    path: Path
    data_dir: Path
    clips: tuple[Clip, ...]
    filtered_duration: float

    @property
    def duration(self) -> float:
        return sum(c.duration for c in self.clips)


def read_manifest(path: Path, data_dir: Path | None = None,
                  max_duration: float = MAX_DURATION) -> Manifest:
    """The clips of the manifest at ``path``; audio paths resolved against ``data_dir`` (default:
    the manifest's folder) as the reference joins them."""
    data_dir = Path(data_dir if data_dir is not None else path.parent)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DatasetError(f"cannot read the whisper manifest {path}: {exc.strerror}",
                           f"give the {MANIFEST_NAME} the reference's dataset scripts write "
                           "(docs/whisper.md)") from exc
    except ValueError as exc:
        raise DatasetError(f"{path} is not JSON ({exc})",
                           f"give the {MANIFEST_NAME} the reference's dataset scripts write") \
            from exc
    if not isinstance(raw, list):
        raise DatasetError(f"{path} is not a whisper manifest (a JSON list of clips)",
                           f"give the {MANIFEST_NAME} the reference's dataset scripts write")
    clips: list[Clip] = []
    filtered = 0.0
    for number, item in enumerate(raw):
        try:
            entry = ManifestEntry.model_validate(item)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise DatasetError(f"{path}: clip {number}: {where}: {first['msg']}",
                               "is this the manifest of the repacked LibriSpeech clips?") from exc
        if entry.original_duration > max_duration:
            filtered += entry.original_duration
            continue
        text = entry.transcript if "transcript" in item else _text_file(entry)
        if not isinstance(text, str):
            filtered += entry.original_duration  # the reference drops it with a warning
            continue
        files = [f for f in entry.files if f.speed == 1.0]
        if not files:
            raise DatasetError(f"{path}: clip {number} has no speed-1 audio file",
                               "the reference reads the file whose speed is 1")
        # os.path.join, as the reference joins: an absolute fname stands as it is
        audio = Path(os.path.join(data_dir, files[0].fname))
        clips.append(Clip(audio=audio, duration=entry.original_duration, transcript=text))
    return Manifest(path=path, data_dir=data_dir, clips=tuple(clips), filtered_duration=filtered)


def _text_file(entry: ManifestEntry) -> str | None:
    if entry.text_filepath is None:
        return None
    with open(entry.text_filepath, encoding="utf-8") as fh:  # as given, as the reference opens it
        return fh.read().replace("\n", "")


def relocated(manifest: Manifest) -> Manifest:
    """The manifest with each missing audio path found again under the data folder by its last
    two parts (``dev-all-repack/NAME.wav``): a manifest written with absolute paths (the
    reference's container writes ``/data/...``) read from wherever the folder now is. A clip
    found nowhere: DatasetError naming it."""
    moved: list[Clip] = []
    for index, clip in enumerate(manifest.clips):
        audio = clip.audio
        if not audio.is_file():
            tail = manifest.data_dir.joinpath(*audio.parts[-2:])
            if not tail.is_file():
                raise DatasetError(f"clip {index} of {manifest.path}: no audio at {audio} "
                                   f"(nor {tail})", "give --dataset the folder that holds "
                                   f"{CLIPS_FOLDER}/ (the reference's DATA_DIR)")
            audio = tail
        moved.append(Clip(audio=audio, duration=clip.duration, transcript=clip.transcript))
    return Manifest(path=manifest.path, data_dir=manifest.data_dir, clips=tuple(moved),
                    filtered_duration=manifest.filtered_duration)
