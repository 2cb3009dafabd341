"""Whisper (speech to text, v6.1): LibriSpeech dev-clean + dev-other repacked into clips of at
most 30 s, read from the official manifest (``speech/manifest.py``); each clip becomes one
generation request carrying its audio file and the reference's decoder prompt, greedy, at most
200 new tokens (``speech2text/reference_SUT.py``). The LoadGen response is not the token ids but
the int64 indices of the transcript's characters in ``accuracy_eval.py``'s labels, with
``n_tokens`` the generated tokens; accuracy is that script's word error rate.

``--dataset`` is the folder holding ``dev-all-repack.json`` and ``dev-all-repack/`` (the
reference's DATA_DIR), or the manifest itself. The model's tokenizer (``--model DIR``, or
``--task-option tokenizer=DIR``) turns the prompt into ids and generated ids into text, as
vLLM does with the model's own tokenizer (special tokens skipped).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Sequence

from pydantic import Field

from mlharness.errors import ConfigError, DatasetError
from mlharness.options import Options
from mlharness.prompts import Generated, GenerationRequest
from mlharness.rules import BenchmarkRules
from mlharness.speech import labels, wer
from mlharness.speech.manifest import MANIFEST_NAME, Manifest, read_manifest, relocated
from mlharness.tasks.base import AccuracyResult, GenerationTask, Progress, TaskOptions

#: the decoder prompt of every request (QSL.py ``prompt``)
PROMPT = "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"


class WhisperOptions(Options):
    """``--task-option`` keys of whisper."""

    #: the manifest (default: dev-all-repack.json in --dataset)
    manifest: Path | None = None
    #: the model's Hugging Face tokenizer directory (default: --model)
    tokenizer: Path | None = None
    #: fewer new tokens than the reference's 200 (quick trials; the result says so)
    max_new_tokens: int | None = Field(default=None, ge=1)


class WhisperTask(GenerationTask):
    """The whisper benchmark on the official manifest layout."""

    response_dtype = labels.RESPONSE_DTYPE
    rules: BenchmarkRules  # always given: the sampling (generation) and the WER target

    def __init__(self, name: str, options: TaskOptions) -> None:
        self.generation = self.take_rules(name, options)
        parsed = options.parsed(WhisperOptions)
        reference = self.generation.max_new_tokens
        if parsed.max_new_tokens is not None and parsed.max_new_tokens > reference:
            raise ConfigError(f"--task-option max_new_tokens={parsed.max_new_tokens} is out of "
                              f"range: {name} allows 1..{reference} (the reference generates "
                              f"at most {reference})", f"give a number from 1 to {reference}, "
                              "or leave the option out")
        self.max_new_tokens = parsed.max_new_tokens or reference
        self.manifest = _manifest(options.dataset, parsed.manifest)
        clips = len(self.manifest.clips)
        if not clips:
            raise DatasetError(f"{self.manifest.path} keeps no clip of at most 30 s",
                               "is this the repacked manifest (dev-all-repack.json)?")
        self.count = min(clips, options.max_samples) if options.max_samples else clips
        tokenizer = parsed.tokenizer or options.model
        self.tokenizer_dir = Path(tokenizer).resolve() if tokenizer is not None else None
        self._tokenizer: Any = None
        self._tokenizer_lock = threading.Lock()
        self._prompt_ids: tuple[int, ...] | None = None
        self._audio: dict[int, bytes] = {}

    # ---- what LoadGen and the SUT ask -------------------------------------------------------

    def prepare(self, progress: Progress | None = None) -> None:
        """Find every clip's audio (a manifest with the container's absolute paths is read
        from wherever its folder is now) and the tokenizer, before LoadGen starts."""
        self.manifest = relocated(self.manifest)
        if self.tokenizer_dir is not None:
            self.tokenizer()

    def load_samples(self, indices: Sequence[int]) -> None:
        """The clips' audio files, as bytes (the reference holds every clip in memory)."""
        if not self._audio:
            self.manifest = relocated(self.manifest)
        for index in indices:
            if index not in self._audio:
                self._audio[index] = self.manifest.clips[index].audio.read_bytes()

    def unload_samples(self, indices: Sequence[int]) -> None:
        for index in indices:
            self._audio.pop(index, None)

    def sample_path(self, index: int) -> Path:
        """Clip ``index``'s audio file (a calibration list names clips by its file name)."""
        return self.manifest.clips[index].audio

    def sample_length(self, index: int) -> int:
        return int(self.manifest.clips[index].duration * 1000)

    def request(self, index: int) -> GenerationRequest:
        """Clip ``index``: its audio and the decoder prompt, sampled as the reference does
        (greedy, at most 200 new tokens: the rules' generation)."""
        audio = self._audio.get(index)
        if audio is None:  # a warm-up or a sample LoadGen did not load
            audio = self.manifest.clips[index].audio.read_bytes()
        g = self.generation
        return GenerationRequest(input_ids=self.prompt_ids(), text=PROMPT,
                                 max_new_tokens=self.max_new_tokens,
                                 min_new_tokens=g.min_new_tokens, temperature=g.temperature,
                                 top_p=g.top_p, top_k=g.top_k, audio=audio)

    def encode_output(self, index: int, ids: Sequence[int]) -> bytes:
        """The transcript as label indices (reference_SUT.py): a transcription server's text
        as it streamed it (a :class:`~mlharness.prompts.Generated` with text), else the ids'
        text by the model's tokenizer, special tokens skipped, as vLLM detokenizes."""
        if isinstance(ids, Generated) and ids.text is not None:
            return labels.encode(ids.text)
        tokenizer = self.tokenizer()
        with self._tokenizer_lock:  # a fast tokenizer is not safe across threads
            text = tokenizer.decode(list(ids), skip_special_tokens=True)
        return labels.encode(text)

    # ---- the model's tokenizer --------------------------------------------------------------

    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            if self.tokenizer_dir is None or not Path(self.tokenizer_dir).is_dir():
                raise ConfigError("whisper needs the model's tokenizer (its prompt ids, and "
                                  "the text of the generated ids)",
                                  "give --model DIR (the Hugging Face whisper-large-v3 folder) "
                                  "or --task-option tokenizer=DIR")
            # lazy: transformers loads only when a run needs the tokenizer
            from transformers import AutoTokenizer

            try:
                self._tokenizer = AutoTokenizer.from_pretrained(self.tokenizer_dir,
                                                                local_files_only=True)
            except (OSError, ValueError) as exc:
                raise ConfigError(f"no tokenizer in {self.tokenizer_dir}: {exc}",
                                  "give the whisper-large-v3 folder (tokenizer.json)") from exc
        return self._tokenizer

    def prompt_ids(self) -> tuple[int, ...] | None:
        """The decoder prompt as the model's tokenizer encodes it (four special tokens); None
        without a tokenizer (a transcription server builds the prompt itself)."""
        if self.tokenizer_dir is None:
            return None
        if self._prompt_ids is None:
            tokenizer = self.tokenizer()
            with self._tokenizer_lock:
                ids = tokenizer.encode(PROMPT, add_special_tokens=False)
            self._prompt_ids = tuple(int(i) for i in ids)
        return self._prompt_ids

    # ---- accuracy ---------------------------------------------------------------------------

    def score(self, entries: list[tuple[int, bytes]]) -> AccuracyResult:
        """accuracy_eval.py's WER over every entry of the log, in its order."""
        if not entries:
            raise DatasetError("the accuracy log has no entries", "re-run the accuracy test")
        hyps, refs = [], []
        for index, data in entries:
            if not 0 <= index < len(self.manifest.clips):
                raise DatasetError(f"accuracy log sample {index} is outside the manifest "
                                   f"({len(self.manifest.clips)} clips)",
                                   "is this the right --dataset?")
            hyps.append(labels.decode_response(data))
            refs.append(labels.decode(labels.reference_indices(
                self.manifest.clips[index].transcript)))
        found = wer.word_error_rate(hyps, refs)
        rules, reference = self.rules, self.generation.max_new_tokens
        failures = []
        if len(entries) < rules.dataset_size:
            failures.append(f"{len(entries)} of the {rules.dataset_size} clips scored")
        if self.max_new_tokens < reference:
            failures.append(f"max_new_tokens {self.max_new_tokens} < the reference's "
                            f"{reference}")
        allowed = 100 - rules.accuracy_target  # accuracy = 100 - WER (accuracy_eval.py)
        return AccuracyResult(metric=rules.accuracy_metric, value=(1 - found.wer) * 100,
                              text=found.accuracy_line() + "\n", target=rules.accuracy_target,
                              failures=failures,
                              shown=f"WER {found.wer * 100:.3f}% (<= {allowed:.3f}%)",
                              details={"wer": found.wer * 100, "errors": found.errors,
                                       "words": found.words, "clips": found.clips})

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "manifest": str(self.manifest.path),
                "samples": self.count, "max_new_tokens": self.max_new_tokens,
                "tokenizer": str(self.tokenizer_dir) if self.tokenizer_dir else None}


def _manifest(dataset: Path | None, manifest: Path | None) -> Manifest:
    if dataset is None and manifest is None:
        raise DatasetError("whisper needs its dataset",
                           f"give --dataset DIR: the folder holding {MANIFEST_NAME} and "
                           "dev-all-repack/ (docs/whisper.md; `mlharness get whisper-librispeech`)")
    if dataset is not None and Path(dataset).is_file():
        manifest, dataset = manifest or Path(dataset), Path(dataset).parent
    data_dir = Path(dataset) if dataset is not None else Path(manifest).parent  # type: ignore[arg-type]
    path = manifest or data_dir / MANIFEST_NAME
    # absolute: a run's child works in its run directory
    return read_manifest(Path(path).resolve(), data_dir.resolve())


def create(name: str, options: TaskOptions) -> WhisperTask:
    return WhisperTask(name, options)
