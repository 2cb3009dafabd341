"""In-process text generation with Hugging Face ``transformers`` (``--backend hf --model DIR``).

``DIR`` is a local causal-LM directory (``config.json`` + weights, usually a tokenizer), read with
``local_files_only`` (nothing is downloaded). Requests wait in one FIFO queue; ``concurrency``
worker threads each take one and run ``model.generate`` on it (batch 1), streaming the first
token to ``on_first`` and every output id to ``on_done``. The sampling settings are the
request's only (the model's ``generation_config.json`` gives just its special tokens), greedy at
``temperature == 0`` or ``top_k == 1``. ``--precision`` fp32/bf16 picks the weights' dtype;
int8 is refused.
"""

from __future__ import annotations

import logging
import queue
import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from mlharness.backends.base import (BackendOptions, GenerationRequest, OnDone, OnError,
                                     OnFirst, StreamingBackend)
from mlharness.backends.hf_speech import QUANTISER, HfSpeech
from mlharness.errors import ConfigError, ModelError, one_line
from mlharness.llm.demo import quiet_torch_imports
from mlharness.options import Options

log = logging.getLogger(__name__)

DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
_HINT = "give --model DIR: a Hugging Face model directory (config.json + weights)"


class HfOptions(Options):
    """``--backend-option`` keys of the hf backend."""

    #: requests generated at once, each in a worker thread of its own
    concurrency: int = Field(default=1, ge=1)
    #: the weights' dtype; None: from --precision (a different one is refused, not applied)
    dtype: Literal["float32", "bfloat16"] | None = None
    eos_token_id: int | None = None  # None: the model's own end-of-sequence token(s)


_Job = tuple[GenerationRequest, OnFirst, OnDone, OnError]


class HfBackend(StreamingBackend):
    name = "hf"
    model_framework = "hf"  # a Hugging Face checkpoint folder (whisper-large-v3 from the cache)
    options_model = HfOptions
    #: ``mlharness calibrate -b whisper --backend hf``: a calibrated int8 Whisper folder
    quantiser = QUANTISER

    @staticmethod
    def prepare_process() -> None:
        """The run's worker imports torch and transformers quietly (QUIET_LOGGERS)."""
        quiet_torch_imports()

    def __init__(self) -> None:
        self.concurrency = 1
        self.model: Any = None
        self.tokenizer: Any = None
        self.tokenizer_problem = "not loaded"
        self.directory: Path | None = None
        self.dtype = "float32"
        self.eos_token_id: int | None = None
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._workers: list[threading.Thread] = []
        self._closing = threading.Event()
        self._tokenize_lock = threading.Lock()  # a fast tokenizer is not safe across threads
        self._generation: Any = None  # hf_generate, once a model is loaded
        self._speech: HfSpeech | None = None  # a Whisper model (hf_speech.py)

    @classmethod
    def framework(cls) -> str:
        # lazy: torch and transformers load only with a model or when asked for their versions
        from mlharness.backends.hf_generate import versions

        v = versions()
        return f"transformers {v['transformers']} (torch {v['torch']})"

    def load(self, model: Path | None, options: BackendOptions) -> None:
        """Open the model directory and start the worker threads."""
        if model is None or not (Path(model) / "config.json").is_file():
            raise ModelError(f"no Hugging Face model directory at {model}", hint=_HINT)
        if options.device != "cpu":
            raise ConfigError("the hf backend is built for cpu here",
                              hint="drop --device or use --device cpu")
        if _is_whisper(Path(model)):  # speech to text: batched transcription (hf_speech.py)
            self._speech = HfSpeech()
            self._speech.load(Path(model), options, options.extra_as(HfOptions).concurrency)
            self.model, self.directory = self._speech.model, Path(model)
            self.concurrency = self._speech.concurrency * self._speech.batch
            return
        if options.precision not in DTYPES:
            raise ConfigError(f"the hf backend does not run --precision {options.precision}",
                              hint="use --precision fp32 or bf16")
        extra = options.extra_as(HfOptions)
        dtype = DTYPES[options.precision]
        if extra.dtype is not None and extra.dtype != dtype:
            raise ConfigError(f"dtype={extra.dtype} contradicts --precision "
                              f"{options.precision} ({dtype})",
                              hint="give the precision with --precision only")
        # lazy: torch and transformers load only with a model
        from mlharness.backends import hf_generate

        directory = Path(model)
        try:
            net = hf_generate.load_model(directory, dtype, options.threads)
        except Exception as exc:  # transformers raises OSError, ValueError, ... for bad dirs
            raise ModelError(f"transformers cannot load {directory}: {one_line(exc, 200)}",
                             hint=_HINT) from exc
        self.tokenizer, self.tokenizer_problem = hf_generate.load_tokenizer(directory)
        self._generation = hf_generate
        self.model, self.directory, self.dtype = net, directory, dtype
        self.concurrency, self.eos_token_id = extra.concurrency, extra.eos_token_id
        self._workers = [threading.Thread(target=self._work, name=f"hf-generate-{k}", daemon=True)
                         for k in range(self.concurrency)]
        for worker in self._workers:
            worker.start()

    @property
    def inputs(self) -> None:
        return None  # no tensor signature: requests carry token ids or text

    def submit(self, request: GenerationRequest, on_first: OnFirst, on_done: OnDone,
               on_error: OnError) -> None:
        """Queue ``request``; a worker thread generates it."""
        if self._speech is not None:
            self._speech.submit(request, on_first, on_done, on_error)
            return
        if self.model is None or self._closing.is_set():
            _call(on_error, "backend closed" if self._closing.is_set() else "backend not loaded")
            return
        self._queue.put((request, on_first, on_done, on_error))

    def close(self) -> None:
        """Stop generations in flight, fail the queued requests, join the worker threads."""
        if self._speech is not None:
            self._speech.close()
        self._closing.set()
        for _ in self._workers:
            self._queue.put(None)
        for worker in self._workers:
            worker.join()
        self._workers = []

    def _work(self) -> None:
        while (job := self._queue.get()) is not None:
            request, on_first, on_done, on_error = job
            if self._closing.is_set():
                _call(on_error, "backend closed")
                continue
            try:
                ids = self._generate(request, on_first)
            except Exception as exc:  # anything generate raises fails this request only
                _call(on_error, f"generation failed: {type(exc).__name__}: {one_line(exc)}")
                continue
            if self._closing.is_set():  # stopped early by _Closed
                _call(on_error, "backend closed")
            else:
                _call(on_done, ids)

    def _prompt(self, request: GenerationRequest) -> list[int]:
        if request.input_ids is not None:
            return list(request.input_ids)
        if request.text is None:
            raise ValueError("the request has neither token ids nor text")
        if self.tokenizer is None:
            raise ValueError(f"a text prompt needs a tokenizer, and {self.directory} has none "
                             f"({self.tokenizer_problem})")
        with self._tokenize_lock:
            return list(self.tokenizer(request.text)["input_ids"])

    def sends(self, request: GenerationRequest) -> str | None:
        return ("token ids, in this process" if request.input_ids is not None
                else "text tokenized here, in this process")

    def _generate(self, request: GenerationRequest, on_first: OnFirst) -> list[int]:
        return self._generation.generate(self.model, self._prompt(request), request,
                                         self.eos_token_id, on_first, self._closing)

    def describe(self) -> dict[str, Any]:
        if self._speech is not None:
            return self._speech.describe()
        config = getattr(self.model, "config", None)
        own = getattr(self.model, "generation_config", None)
        eos = self.eos_token_id if self.eos_token_id is not None else getattr(own, "eos_token_id",
                                                                              None)
        generation = self._generation
        return {"name": self.name, **(generation.versions() if generation else {}),
                "model": str(self.directory),
                "model_type": getattr(config, "model_type", None), "dtype": self.dtype,
                "concurrency": self.concurrency,
                "threads": generation.threads() if generation else None,
                "eos_token_id": eos, "tokenizer": self.tokenizer is not None}


def _call(callback: Any, value: Any) -> None:
    """A caller's callback, whose failure is logged and never ends a worker thread."""
    try:
        callback(value)
    except Exception:  # noqa: BLE001 - the caller's bug, not the backend's
        log.exception("hf backend: a completion callback raised")


def _is_whisper(directory: Path) -> bool:
    """Whether the model directory holds a Whisper checkpoint (its config.json's model_type),
    read without transformers."""
    import json

    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("model_type") == "whisper"
