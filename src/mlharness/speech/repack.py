"""The whisper dataset built from LibriSpeech as the reference's scripts build it
(``speech2text/download_dataset.sh``: ``utils/convert_librispeech.py`` lists every utterance of
dev-clean and dev-other with its transcript lower-cased and stripped;
``utils/repackage_librispeech.py`` then packs the utterances of each speaker's chapter, in
order, into clips of at most 30 s, 0.5 s of silence between two, an utterance longer than 30 s
left out, and writes each clip as ``<speaker>-<chapter>_<n>.wav`` with a manifest of them).

The clips are the reference's, sample for sample: the same libsndfile reads the 16-bit
utterances as float32 and writes each clip from the same arrays (the reference's intermediate
16-bit WAV copies of the FLAC files hold the same samples). One thing differs: the reference
lists chapters in the order its file system's directory walk returns them, which no other
machine reproduces; here chapters are taken in sorted order. The manifest's paths are relative
to its folder (the reference writes its ``--output_dir`` into them)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from mlharness.errors import DatasetError
from mlharness.speech import audio
from mlharness.speech.manifest import CLIPS_FOLDER, MANIFEST_NAME

#: seconds (repackage_librispeech.py MAX_DURATION, PAD_DURATION)
MAX_CLIP = 30.0
PAD = 0.5
#: the LibriSpeech subsets the benchmark uses (utils/inference_librispeech.csv)
SUBSETS = ("dev-clean", "dev-other")

Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class Utterance:
    name: str  # <speaker>-<chapter>-<utterance>
    path: Path
    transcript: str


def chapters(librispeech: Path, subsets: tuple[str, ...] = SUBSETS) -> list[list[Utterance]]:
    """Every chapter's utterances (the ``*.trans.txt`` lines, in order), chapters sorted by
    their path, from ``librispeech/<subset>/<speaker>/<chapter>/``."""
    found: list[list[Utterance]] = []
    for subset in subsets:
        root = librispeech / subset
        if not root.is_dir():
            raise DatasetError(f"no LibriSpeech {subset} at {root}",
                               f"unpack {subset}.tar.gz (openslr.org/12) so that "
                               f"{librispeech}/{subset}/ holds its speakers")
        for trans in sorted(root.glob("*/*/*.trans.txt")):
            chapter = []
            for line in trans.read_text(encoding="utf-8").splitlines():
                name, _, text = line.partition(" ")
                if name:
                    chapter.append(Utterance(name, trans.parent / f"{name}.flac",
                                             text.lower().strip()))
            found.append(chapter)
    return [c for c in found if c]


def _packed(chapter: list[Utterance]) -> Iterator[list[tuple[np.ndarray, str]]]:
    """The chapter's utterances grouped into clips of at most 30 s, in order."""
    group: list[tuple[np.ndarray, str]] = []
    seconds = 0.0
    for utterance in chapter:
        samples = audio.load(utterance.path)
        length = len(samples) / audio.SAMPLE_RATE
        if length > MAX_CLIP:
            continue
        if group and seconds + PAD + length > MAX_CLIP:
            yield group
            group, seconds = [], 0.0
        group.append((samples, utterance.transcript))
        seconds += length + (PAD if len(group) > 1 else 0.0)
    if group:
        yield group


def _clip(group: list[tuple[np.ndarray, str]]) -> tuple[np.ndarray, str]:
    """One clip's samples and transcript: utterances joined by 0.5 s of zeros (float64 zeros:
    with more than one utterance the clip is float64, as numpy concatenates them there)."""
    pad = np.zeros(int(PAD * audio.SAMPLE_RATE))
    parts: list[np.ndarray] = []
    for samples, _ in group:
        if parts:
            parts.append(pad)
        parts.append(samples)
    return np.concatenate(parts), " ".join(text for _, text in group)


def _entry(samples: np.ndarray, transcript: str, fname: str) -> dict:
    """The manifest entry of one clip (the fields repackage_librispeech.py writes)."""
    seconds = float(len(samples) / audio.SAMPLE_RATE)
    return {"transcript": transcript,
            "files": [{"channels": 1, "sample_rate": float(audio.SAMPLE_RATE), "bitdepth": 16,
                       "bitrate": 256000.0, "duration": seconds, "num_samples": len(samples),
                       "encoding": "Signed Integer PCM", "silent": False, "fname": fname,
                       "speed": 1}],
            "original_duration": seconds, "original_num_samples": len(samples)}


def repack(librispeech: Path, out: Path, progress: Progress | None = None,
           subsets: tuple[str, ...] = SUBSETS) -> Path:
    """Write ``out/dev-all-repack/*.wav`` and ``out/dev-all-repack.json`` from the LibriSpeech
    folder (the one holding ``dev-clean/`` and ``dev-other/``); returns the manifest's path."""
    found = chapters(librispeech, subsets)
    if not found:
        raise DatasetError(f"no LibriSpeech utterances under {librispeech}",
                           "give the folder that holds dev-clean/ and dev-other/")
    clips_dir = out / CLIPS_FOLDER
    clips_dir.mkdir(parents=True, exist_ok=True)
    entries = []
    for done, chapter in enumerate(found):
        key = "-".join(chapter[0].name.split("-")[:2])
        for n, group in enumerate(_packed(chapter)):
            samples, transcript = _clip(group)
            fname = f"{CLIPS_FOLDER}/{key}_{n}.wav"
            audio.write(out / fname, samples)
            entries.append(_entry(samples, transcript, fname))
        if progress:
            progress(done + 1, len(found), "chapters repacked")
    manifest = out / MANIFEST_NAME
    partial = manifest.with_suffix(".json.partial")
    partial.write_text(json.dumps(entries, indent=2), encoding="utf-8")
    partial.replace(manifest)
    return manifest
