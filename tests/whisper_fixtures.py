"""Whisper's test data, made in the test session (nothing generated is committed): speech spoken
by espeak-ng into a LibriSpeech-style tree of 16 kHz FLAC files with ``*.trans.txt``
transcripts, repacked into the official manifest layout; the real whisper-large-v3 tokenizer
converted from the tiktoken file that openai-whisper ships; a random-weight tiny
WhisperForConditionalGeneration of large-v3's input shape (128 mel bins) around it."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from extras import extras_required

#: whisper-large-v3's special tokens: ids from openai-whisper's v3 encoding (100 languages)
NUM_LANGUAGES = 100
PROMPT = "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"

#: (subset, speaker, chapter) -> utterances, as LibriSpeech lays them out; chapter 84-121123
#: packs into two clips, 1272-128104 holds one utterance over 30 s (left out), 116-288045 is
#: dev-other's
CHAPTERS = {
    ("dev-clean", "84", "121123"): [
        "Go, do you hear?",
        "But in less than five minutes the staircase groaned beneath an extraordinary weight.",
        "At this moment the whole soul of the old man seemed centred in his eyes, which "
        "became bloodshot. The veins of the throat swelled, his cheeks and temples became "
        "purple, as though he was struck with epilepsy. Nothing was wanting to complete this "
        "but the utterance of a cry.",
        "And the cry issued from his pores, if we may thus speak: a cry frightful in its "
        "silence.",
        "He had understood everything, and wished to reply, but could not speak a single word "
        "of what he felt.",
    ],
    ("dev-clean", "1272", "128104"): [
        "Mister Quilter is the apostle of the middle classes, and we are glad to welcome his "
        "gospel.",
        " ".join(["Nor is mister Quilter's manner less interesting than his matter, he tells us "
                  "that at this festive season of the year, with Christmas and roast beef "
                  "looming before us, similes drawn from eating and its results occur most "
                  "readily to the mind."] * 3),
    ],
    ("dev-other", "116", "288045"): [
        "As I approached the city I heard bells ringing, and a little later I found the "
        "streets astir with throngs of well dressed people in family groups.",
        "Twenty-five dollars, ten percent, and 3rd of May.",
    ],
}


#: what the session made once (session_data, session_model), shared by the whisper modules
#: (conftest.py runs them on one worker under ``make test``)
_made: dict[str, Any] = {}


def session_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The session's LibriSpeech tree and its repacked dataset, made on first use (espeak-ng
    takes most of a minute): ``{"tmp", "librispeech", "data", "manifest"}``. Read only: a test
    that changes data copies it first."""
    if "data" not in _made:
        from mlharness.speech import repack

        tmp = tmp_path_factory.mktemp("whisper_session")
        base = librispeech(tmp)
        _made.update(tmp=tmp, librispeech=base, manifest=repack.repack(base, tmp / "data"),
                     data=tmp / "data")
    return _made


def session_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's random-weight tiny Whisper (made on first use)."""
    if "model" not in _made:
        _made["model"] = tiny_whisper(session_data(tmp_path_factory)["tmp"] / "model")
    return _made["model"]


def need_program(program: str, package: str | None = None) -> str:
    """The path of a Debian package's program, installed with apt-get when it is missing and we
    are root (CI runs as root on a fresh machine); otherwise a skip (a failure under `make test`
    or CI) saying why."""
    found = shutil.which(program)
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        with open(Path(tempfile.gettempdir()) / "mlharness-apt.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one apt-get at a time across test workers
            found = shutil.which(program)
            for cmd in ([] if found else [["apt-get", "update", "-qq"],
                                          ["apt-get", "install", "-y", "-qq",
                                           "--no-install-recommends", package or program]]):
                subprocess.run(cmd, capture_output=True, env=env, timeout=900)
        found = shutil.which(program)
    if found is None:
        message = (f"{program} is missing and cannot be installed here: "
                   f"apt-get install {package or program}")
        if extras_required():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return found


def need_espeak() -> str:
    return need_program("espeak-ng")


def speak(text: str, path: Path, speed: int = 175) -> np.ndarray:
    """``text`` spoken by espeak-ng, resampled to 16 kHz, written as 16-bit FLAC at ``path``;
    the int16 samples."""
    import soundfile as sf
    from scipy.signal import resample_poly

    raw = path.with_suffix(".espeak.wav")
    subprocess.run([need_espeak(), "-s", str(speed), "-w", str(raw), text], check=True,
                   capture_output=True, timeout=60)
    samples, rate = sf.read(str(raw), dtype="float32")
    raw.unlink()
    resampled = resample_poly(samples, 16_000, rate) if rate != 16_000 else samples
    pcm = np.clip(np.round(resampled * 32767), -32768, 32767).astype(np.int16)
    sf.write(str(path), pcm, 16_000, subtype="PCM_16")
    return pcm


def librispeech(root: Path, chapters: dict | None = None) -> Path:
    """A LibriSpeech folder (``root/LibriSpeech``) holding ``<subset>/<speaker>/<chapter>/``
    FLAC files and their ``<speaker>-<chapter>.trans.txt`` (upper case, as LibriSpeech's)."""
    base = root / "LibriSpeech"
    for (subset, speaker, chapter), texts in (chapters or CHAPTERS).items():
        folder = base / subset / speaker / chapter
        folder.mkdir(parents=True, exist_ok=True)
        lines = []
        for n, text in enumerate(texts):
            name = f"{speaker}-{chapter}-{n:04d}"
            speak(text, folder / f"{name}.flac")
            lines.append(f"{name} {text.upper()}")
        (folder / f"{speaker}-{chapter}.trans.txt").write_text("\n".join(lines) + "\n")
    return base


def whisper_encoding():
    """openai-whisper's tiktoken encoding of large-v3 (its bundled multilingual.tiktoken)."""
    from whisper.tokenizer import get_encoding

    return get_encoding("multilingual", num_languages=NUM_LANGUAGES)


def tokenizer_dir(directory: Path) -> Path:
    """whisper-large-v3's vocabulary and special tokens as a Hugging Face tokenizer directory,
    converted from openai-whisper's tiktoken file (the ids equal the published model's)."""
    import whisper
    from transformers import WhisperTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    encoding = whisper_encoding()
    asset = Path(whisper.__file__).parent / "assets" / "multilingual.tiktoken"
    specials = sorted(encoding._special_tokens, key=encoding._special_tokens.get)
    raw = TikTokenConverter(vocab_file=str(asset), pattern=encoding._pat_str,
                            additional_special_tokens=specials).converted()
    directory.mkdir(parents=True, exist_ok=True)
    raw.save(str(directory / "tokenizer.json"))
    fast = WhisperTokenizerFast(tokenizer_file=str(directory / "tokenizer.json"),
                                unk_token="<|endoftext|>", bos_token="<|endoftext|>",
                                eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.save_pretrained(directory)
    return directory


def tiny_whisper(directory: Path, tokenizer: Path | None = None, seed: int = 0,
                 d_model: int = 64, layers: int = 2, heads: int = 4) -> Path:
    """A random-weight WhisperForConditionalGeneration of large-v3's vocabulary and input (128
    mel bins, 30 s), with its tokenizer and feature extractor, saved in ``directory``."""
    import torch
    from transformers import (WhisperConfig, WhisperFeatureExtractor,
                              WhisperForConditionalGeneration)

    encoding = whisper_encoding()
    special = encoding._special_tokens
    torch.manual_seed(seed)
    config = WhisperConfig(
        vocab_size=encoding.n_vocab, num_mel_bins=128, d_model=d_model,
        encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=heads,
        decoder_attention_heads=heads, encoder_ffn_dim=4 * d_model,
        decoder_ffn_dim=4 * d_model, max_source_positions=1500, max_target_positions=448,
        pad_token_id=special["<|endoftext|>"], bos_token_id=special["<|endoftext|>"],
        eos_token_id=special["<|endoftext|>"],
        decoder_start_token_id=special["<|startoftranscript|>"])
    model = WhisperForConditionalGeneration(config).eval()
    model.save_pretrained(directory)
    WhisperFeatureExtractor(feature_size=128).save_pretrained(directory)
    if tokenizer is None:
        tokenizer_dir(directory)
    else:
        for f in tokenizer.iterdir():
            if f.is_file():
                shutil.copy(f, directory / f.name)
    return directory


#: runs scripts in turn in one Python, each as ``python SCRIPT ARGS`` would (its folder first
#: on sys.path, as ``__main__``, in its own working folder), its standard output into a file
def referee_scripts(jobs: list[tuple[Path, list[str], Path]], cwd: Path) -> None:
    """Scripts, unmodified, in ONE process of whisper's referee Python (whisper and torch
    imported once, not once a script): each ``(folder, [script, *args], stdout_file)`` in
    turn."""
    import referee

    referee.VENVS["whisper"].run_scripts(list(jobs), cwd)


def accuracy_log(path: Path, responses: list[tuple[int, bytes]]) -> Path:
    """An accuracy log as LoadGen writes one: ``(qsl_idx, response bytes)`` in order."""
    lines = [f'{{ "seq_id" : {seq}, "qsl_idx" : {idx}, "data" : "{data.hex().upper()}", '
             f'"token_count" : {len(data) // 8} }}' for seq, (idx, data) in enumerate(responses)]
    path.write_text("[\n" + ",\n".join(lines) + "\n]\n")
    return path
