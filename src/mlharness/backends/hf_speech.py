"""The hf backend's speech-to-text side (``--backend hf --model DIR`` on a Whisper checkpoint):
requests that carry audio wait in one FIFO queue; each worker thread takes as many as are queued,
up to the run's ``--batch-size`` (default 16), and transcribes them in one greedy pass
(``hf_whisper.py``), reporting each clip's first token after the first step and its ids at the
end. ``--precision`` fp32, bf16 (fast where the CPU has bf16 units: AVX512-BF16, AMX) or int8
(dynamic: the linear layers' weights in int8, activations quantised per batch)."""

from __future__ import annotations

import logging
import queue
import threading
from pathlib import Path
from typing import Any

from mlharness.backends.base import BackendOptions, GenerationRequest, OnDone, OnError, OnFirst
from mlharness.errors import ConfigError, ModelError, one_line
from mlharness.hostinfo import matrix_isa

log = logging.getLogger(__name__)

PRECISIONS = ("fp32", "bf16", "int8")
DEFAULT_BATCH = 16
_Job = tuple[GenerationRequest, OnFirst, OnDone, OnError]


class HfSpeech:
    """Whisper in process, batching the queued clips of each generate pass."""

    def __init__(self) -> None:
        self.model: Any = None
        self.directory: Path | None = None
        self.batch = DEFAULT_BATCH
        self.concurrency = 1
        self.precision = "fp32"
        self.passes = 0  # generate passes run (batches)
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._workers: list[threading.Thread] = []
        self._closing = threading.Event()
        self._runtime: Any = None

    def load(self, model: Path, options: BackendOptions, concurrency: int) -> None:
        if options.precision not in PRECISIONS:
            raise ConfigError(f"the hf backend does not run whisper at --precision "
                              f"{options.precision}", "use --precision fp32, bf16 or int8")
        isa = matrix_isa()
        if options.precision == "bf16" and isa["bf16"] is None:
            cap = isa.get("onednn_max_cpu_isa")
            raise ConfigError("this CPU has no bf16 units (AVX512_BF16 or AMX)"
                              + (f" under ONEDNN_MAX_CPU_ISA={cap}" if cap else "")
                              + ": bf16 would be emulated, slower than fp32",
                              "use --precision fp32, or int8 (dynamic)")
        # lazy: torch and transformers load only with a model
        from mlharness.backends import hf_whisper

        try:
            self.model = hf_whisper.WhisperModel(model, options.precision, options.threads)
        except Exception as exc:  # transformers raises OSError, ValueError, ... for bad dirs
            raise ModelError(f"transformers cannot load the Whisper model in {model}: "
                             f"{one_line(exc, 200)}",
                             hint="give --model the whisper-large-v3 folder (config.json, "
                             "weights, preprocessor_config.json, tokenizer)") from exc
        self._runtime = hf_whisper
        self.directory, self.precision = model, options.precision
        self.batch = options.batch_size or DEFAULT_BATCH
        self.concurrency = concurrency
        self._workers = [threading.Thread(target=self._work, name=f"hf-whisper-{k}", daemon=True)
                         for k in range(concurrency)]
        for worker in self._workers:
            worker.start()

    def submit(self, request: GenerationRequest, on_first: OnFirst, on_done: OnDone,
               on_error: OnError) -> None:
        if request.audio is None or request.input_ids is None:
            _call(on_error, "a Whisper model transcribes audio: the request has no audio or "
                            "no prompt ids")
            return
        if self._closing.is_set():
            _call(on_error, "backend closed")
            return
        self._queue.put((request, on_first, on_done, on_error))

    def close(self) -> None:
        self._closing.set()
        for _ in self._workers:
            self._queue.put(None)
        for worker in self._workers:
            worker.join()
        self._workers = []

    def _take(self) -> list[_Job] | None:
        """The next batch: one job (waiting for it), then whatever is queued, up to the batch
        size; None when the backend closes."""
        first = self._queue.get()
        if first is None:
            return None
        jobs = [first]
        while len(jobs) < self.batch:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is None:
                self._queue.put(None)  # another worker's stop: leave it for the next take
                break
            jobs.append(job)
        return jobs

    def _work(self) -> None:
        while (jobs := self._take()) is not None:
            if self._closing.is_set():
                for job in jobs:
                    _call(job[3], "backend closed")
                continue
            self._run(jobs)

    def _run(self, jobs: list[_Job]) -> None:
        groups: dict[tuple[int, ...], list[_Job]] = {}
        for job in jobs:  # one prompt per pass (every whisper request has the same)
            groups.setdefault(tuple(job[0].input_ids or ()), []).append(job)
        for prompt, group in groups.items():
            try:
                outputs = self.model.transcribe(
                    [j[0].audio for j in group], prompt, [j[0].max_new_tokens for j in group],
                    lambda k, ids, group=group: _call(group[k][1], ids), self._closing)
            except Exception as exc:  # anything generate raises fails these requests only
                for job in group:
                    _call(job[3], f"generation failed: {type(exc).__name__}: {one_line(exc)}")
                continue
            self.passes += 1
            for job, ids in zip(group, outputs):
                if self._closing.is_set():
                    _call(job[3], "backend closed")
                else:
                    _call(job[2], ids)

    def describe(self) -> dict[str, Any]:
        runtime = self._runtime
        config = getattr(self.model, "config", None)
        return {"name": "hf", **(runtime.versions() if runtime else {}),
                "model": str(self.directory), "model_type": getattr(config, "model_type", None),
                "precision": self.precision, "batch_size": self.batch,
                "concurrency": self.concurrency, "passes": self.passes}


def _call(callback: Any, value: Any) -> None:
    """A caller's callback, whose failure is logged and never ends a worker thread."""
    try:
        callback(value)
    except Exception:  # noqa: BLE001 - the caller's bug, not the backend's
        log.exception("hf backend: a completion callback raised")
