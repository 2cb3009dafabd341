"""The 3D-UNet benchmarks (``3d-unet-99``, ``3d-unet-99.9``): KiTS19 volumes segmented window by
window through the inference seam (:meth:`Kits19Task.infer`), scored with DICE.

``-d`` is the raw KiTS19 folder (``case_XXXXX/imaging.nii.gz``, ``segmentation.nii.gz``); the
43 inference cases are pre-processed once into the cache (``prepare``, with progress). A sample
is one case's volume; its response the uint8 label of every voxel (``accuracy_kits.py`` reads it
as ``uint8``). Each backend call is a batch of ``window_batch`` windows of 128^3: the model's
fixed batch (1 for ``3dunet_kits19_128x128x128.onnx``), or ``--task-option window_batch=N`` for
the dynamic-batch model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Callable, Iterator, Sequence

import numpy as np
from pydantic import Field

from mlharness.errors import DatasetError, ModelError
from mlharness.options import Options
from mlharness.rules import BenchmarkRules
from mlharness.tasks.base import (AccuracyResult, Predict, Progress, TaskOptions, TensorSpec,
                                  TensorTask)
from mlharness.tasks.kits19.cache import VolumeCache
from mlharness.tasks.kits19.cases import CaseFiles, case_files
from mlharness.tasks.kits19.dice import DiceSummary, case_dice, decode
from mlharness.tasks.kits19.preprocessing import KITS19
from mlharness.tasks.kits19.window import segment, window_count, window_origins
from mlharness.tasks.vision.cache import default_root

#: windows per backend call for a model with a free batch dimension, unless the user says
DEFAULT_WINDOW_BATCH = 2


class Kits19Options(Options):
    """``--task-option`` keys of the 3D-UNet benchmarks."""

    #: windows of 128^3 per backend call (default: the model's fixed batch; 2 for a free batch
    #: dimension; 1 when the backend cannot tell before loading the model)
    window_batch: Annotated[int, Field(ge=1, le=64)] | None = None
    #: add up one call's logits while the next call runs
    overlap: bool = True
    #: processes that pre-process cases (default: up to 4; a large case takes a few GB)
    prepare_workers: Annotated[int, Field(ge=1)] | None = None
    input_name: str = "input"
    output_name: str = "output"


class Kits19Task(TensorTask):
    """KiTS19 kidney and tumour segmentation by a 3D-UNet, window by window."""

    loadgen_model = "3d-unet"
    response_dtype = "uint8"
    #: a volume is already many backend calls: one a call, each answered when it is done
    samples_per_call = 1

    def __init__(self, name: str, rules: BenchmarkRules, cases: list[CaseFiles],
                 cache: VolumeCache, options: Kits19Options,
                 declared: list[TensorSpec] | None = None) -> None:
        self.name = name
        self.rules = rules
        self.target = rules.accuracy_target
        self.loadgen_model = rules.loadgen_model
        self.cases = cases
        self.cache = cache
        self.options = options
        self.geometry = cache.geometry
        self.input_spec = TensorSpec(options.input_name, "float32", (None, 1, *self.geometry.roi))
        self.window_batch = _window_batch(options, declared)
        self._performance_count = min(rules.performance_sample_count, len(cases))
        self._loaded: dict[int, np.ndarray] = {}

    # -- the QSL -------------------------------------------------------------------------------
    @property
    def model_inputs(self) -> list[TensorSpec]:
        return [self.input_spec]

    def total_count(self) -> int:
        return len(self.cases)

    def performance_count(self) -> int:
        return self._performance_count

    def prepare(self, progress: Progress | None = None) -> None:
        self.cache.build(self.cases, progress, self.options.prepare_workers)

    def load_samples(self, indices: Sequence[int]) -> None:
        for i in indices:
            if i not in self._loaded:
                self._loaded[i] = self.cache.image(self.cases[i])

    def unload_samples(self, indices: Sequence[int]) -> None:
        for i in indices:
            self._loaded.pop(i, None)

    def sample_length(self, index: int) -> int:
        """Windows of the case (what a sample costs)."""
        image = self._loaded.get(index)
        return window_count(image.shape[1:], self.geometry) if image is not None else 0

    # -- the inference seam ------------------------------------------------------------------
    def infer(self, predict: Predict, indices: Sequence[int]) -> list[bytes]:
        """Each volume's windows, ``window_batch`` per backend call, summed into its labels."""
        name, output = self.input_spec.name, self.options.output_name

        def windows_to_logits(windows: np.ndarray) -> np.ndarray:
            outputs = predict({name: windows})
            if output not in outputs:
                raise ModelError(f"the model has no output {output!r} (it has {sorted(outputs)})",
                                 hint="export the model with the official output name 'output', "
                                      "or set --task-option output_name=NAME")
            return outputs[output]

        return [segment(self._loaded[i], windows_to_logits, self.window_batch,
                        self.options.overlap, self.geometry).tobytes() for i in indices]

    def batch_inputs(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
        """Every window of the volumes ``indices``, in order (one call for all of them)."""
        roi = self.geometry.roi
        windows = [self._loaded[i][(slice(None), *(slice(o, o + r) for o, r in zip(origin, roi)))]
                   for i in indices for origin in window_origins(self._loaded[i].shape[1:],
                                                                 self.geometry)]
        return {self.input_spec.name: np.stack(windows)}

    def encode_responses(self, indices: Sequence[int],
                         outputs: dict[str, np.ndarray]) -> list[bytes]:
        """The labels from the logits of every window of ``indices`` (:meth:`batch_inputs`)."""
        logits = outputs[self.options.output_name]
        out: list[bytes] = []
        start = 0
        for i in indices:
            image = self._loaded[i]
            count = window_count(image.shape[1:], self.geometry)
            chunk = logits[start:start + count]
            start += count
            out.append(segment(image, _given(chunk), count, False, self.geometry).tobytes())
        return out

    def model_batches(self, indices: Sequence[int]) -> Iterator[dict[str, np.ndarray]]:
        """The windows :meth:`infer` feeds, call by call."""
        roi = self.geometry.roi
        for i in indices:
            image = self._loaded[i]
            origins = list(window_origins(image.shape[1:], self.geometry))
            for s in range(0, len(origins), self.window_batch):
                yield {self.input_spec.name: np.stack(
                    [image[(slice(None), *(slice(o, o + r) for o, r in zip(origin, roi)))]
                     for origin in origins[s:s + self.window_batch]])}

    def warmup_batches(self, batch: list[int]) -> list[list[int]]:
        """One volume, the one of fewest windows (a case is up to hundreds of calls): its
        windows are the calls a run makes."""
        return [[min(range(len(self.cases)), key=self._windows_of)]]

    def _windows_of(self, index: int) -> int:
        shape = self.cache.image_shape(self.cases[index])
        return window_count(shape[1:], self.geometry) if shape else 1 << 30

    # -- accuracy ----------------------------------------------------------------------------
    def score(self, entries: list[tuple[int, bytes]]) -> AccuracyResult:
        """DICE as ``accuracy_kits.py``: per case (the last response of a QSL index), then the
        means over the cases in the dataset's order."""
        responses = dict(entries)
        scores = []
        for index in sorted(responses):
            if not 0 <= index < len(self.cases):
                raise DatasetError(f"the accuracy log names sample {index}, but the dataset has "
                                   f"{len(self.cases)}", hint="score the log with its own dataset")
            case = self.cases[index]
            label = self.cache.label(case)
            data = responses[index]
            if len(data) != label.size:
                raise ModelError(f"{case.name}: the response has {len(data)} bytes, the volume "
                                 f"{label.size} voxels", hint="responses are one uint8 label "
                                                             "per voxel of the pre-processed case")
            scores.append(case_dice(case.name, decode(data, label.shape), label))
        summary = DiceSummary(tuple(scores))
        return AccuracyResult(
            "DICE", summary.mean, summary.line(), self.target,
            {"kidney": summary.kidney, "tumour": summary.tumour, "cases": len(scores),
             "dataset_size": len(self.cases),
             "per_case": {s.case: [s.kidney, s.tumour] for s in scores}})

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "dataset": str(self.cases[0].imaging.parent.parent),
                "samples": self.total_count(), "window_batch": self.window_batch,
                "overlap": self.options.overlap, "cache": str(self.cache.dir),
                "preprocessing": self.geometry.to_dict()}


def _given(logits: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """A ``predict`` that answers with logits already computed."""
    return lambda _windows: logits


def _window_batch(options: Kits19Options, declared: list[TensorSpec] | None) -> int:
    """The windows per call: the option, else the model's fixed batch, else the default."""
    fixed = {t.shape[0] for t in declared or []
             if t.name == options.input_name and t.shape and t.shape[0] is not None}
    if options.window_batch is not None:
        if fixed and options.window_batch > min(fixed):
            raise ModelError(f"window_batch {options.window_batch} exceeds the model's fixed "
                             f"batch of {min(fixed)}",
                             hint="use the dynamic-batch model "
                                  "(3dunet_kits19_128x128x128_dynbatch.onnx) for batches of "
                                  "windows")
        return options.window_batch
    if fixed:
        return min(fixed)
    free = any(t.name == options.input_name and t.shape and t.shape[0] is None
               for t in declared or [])
    return DEFAULT_WINDOW_BATCH if free else 1  # a model the backend cannot read ahead: 1


def create(name: str, options: TaskOptions) -> Kits19Task:
    """``3d-unet-99`` / ``3d-unet-99.9`` (official ONNX: input ``input`` float32
    [1|N, 1, 128, 128, 128], output ``output`` [.., 3, 128, 128, 128]).

    ``--task-option`` keys: :class:`Kits19Options`.
    """
    opts = options.parsed(Kits19Options)
    rules = options.require_rules(name)  # DICE target, sample counts, the LoadGen model key
    if options.dataset is None:
        raise DatasetError(f"{name} needs --dataset",
                           hint="pass -d the KiTS19 folder holding case_00000/imaging.nii.gz, ...")
    cases = case_files(Path(options.dataset))
    if options.max_samples:
        cases = cases[:options.max_samples]
    cache = VolumeCache(default_root(options.cache_dir), KITS19)
    return Kits19Task(name, rules, cases, cache, opts, options.model_inputs)


__all__ = ["Kits19Options", "Kits19Task", "create"]
