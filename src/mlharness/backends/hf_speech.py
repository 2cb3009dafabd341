"""The hf backend's speech-to-text side (``--backend hf --model DIR`` on a Whisper checkpoint):
requests that carry audio wait in one FIFO queue; each worker thread takes as many as are queued,
up to the run's ``--batch-size`` (default 16), and transcribes them in one greedy pass
(``hf_whisper.py``), reporting each clip's first token after the first step and its ids at the
end. ``--precision`` fp32, bf16 (fast where the CPU has bf16 units: AVX512-BF16, AMX) or int8:
dynamic (the linear layers' weights in int8, activations quantised per batch) on an fp32 folder,
static on the folder ``mlharness calibrate -b whisper --backend hf`` writes
(``hf_whisper_int8.py``; the quantiser below, ``hf_whisper_calibrate.py``)."""

from __future__ import annotations

import json
import logging
import queue
import threading
from pathlib import Path
from typing import Any

from mlharness.backends.base import BackendOptions, GenerationRequest, OnDone, OnError, OnFirst
from mlharness.backends.hf_whisper_folder import MARKER, is_int8_folder, require_minmax
from mlharness.backends.quantised import Quantiser, calibration_record
from mlharness.errors import ConfigError, ModelError, one_line
from mlharness.hostinfo import matrix_isa

log = logging.getLogger(__name__)

PRECISIONS = ("fp32", "bf16", "int8")
DEFAULT_BATCH = 16
_Job = tuple[GenerationRequest, OnFirst, OnDone, OnError]
#: the file naming a calibrated int8 folder and its layers' scales (its presence makes it int8)
def require_source(model: Path) -> None:
    """ModelError unless ``model`` is an fp32 Whisper folder calibrate may start from."""
    model = Path(model)
    config = model / "config.json"
    if not config.is_file():
        raise ModelError(f"calibration for hf needs a Hugging Face Whisper folder, got {model}",
                         hint="pass --model DIR: the whisper-large-v3 folder (config.json, "
                              "weights, preprocessor_config.json, tokenizer)")
    if is_int8_folder(model):
        raise ModelError(f"{model} is already a calibrated int8 model (it holds {MARKER})",
                         hint="calibrate the fp32 folder it was made from")
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{config} is not readable JSON: {one_line(exc)}",
                         hint="pass the whisper-large-v3 folder") from exc
    if data.get("model_type") != "whisper":
        raise ModelError(f"{model} is a {data.get('model_type')!r} model: the hf quantiser "
                         "calibrates Whisper", hint="pass the whisper-large-v3 folder")
    if data.get("quantization_config"):
        method = data["quantization_config"].get("quant_method", "quantised")
        raise ModelError(f"{model} is already quantised ({method}): calibrate starts from the "
                         "fp32 (or bf16) checkpoint", hint="pass the original whisper folder")


def _quantise(model: Path, target: Path, requests: list[Any], method: str,
              task: Any) -> dict[str, Any]:
    # lazy: torch and transformers load only to calibrate
    from mlharness.backends import hf_whisper_calibrate

    return hf_whisper_calibrate.quantise(model, target, requests, method, task)


#: ``mlharness calibrate -b whisper --backend hf``: the int8 folder ``<model>.int8`` (a
#: directory: no suffix), calibrated on the generation requests of the calibration clips
QUANTISER = Quantiser(
    "", "transformers runs the Whisper folder with int8 linear layers of fixed (calibrated) "
        "activation scales (fbgemm int8 GEMM)",
    check_source=require_source, quantise=_quantise, check_method=require_minmax,
    takes="requests")


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
        if is_int8_folder(model) and options.precision != "int8":
            raise ConfigError(f"{model} is a calibrated int8 model, but --precision is "
                              f"{options.precision}", hint="pass --precision int8 (the run "
                              "then records the calibration)")
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
                "precision": self.precision,
                **({"int8": "static (calibrated)" if getattr(self.model, "calibrated", False)
                    else "dynamic",
                    "calibration": calibration_record(self.directory)
                    if self.directory else None} if self.precision == "int8" else {}),
                "batch_size": self.batch,
                "concurrency": self.concurrency, "passes": self.passes}


def _call(callback: Any, value: Any) -> None:
    """A caller's callback, whose failure is logged and never ends a worker thread."""
    try:
        callback(value)
    except Exception:  # noqa: BLE001 - the caller's bug, not the backend's
        log.exception("hf backend: a completion callback raised")
