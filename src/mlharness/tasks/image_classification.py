"""Image classification on an ImageNet-layout dataset (image files + ``val_map.txt``).

Shared by the ResNet50 benchmark and the embedded demo. The response for each sample is one
float32 holding the predicted class index, as the reference harness writes it
(``vision/classification_and_detection/python/dataset.py`` PostProcessCommon / PostProcessArgMax),
so our accuracy logs and the reference's are interchangeable with ``tools/accuracy-imagenet.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Sequence

import numpy as np
from pydantic import Field

from mlharness.errors import DatasetError, ModelError
from mlharness.files import read_text_file
from mlharness.options import Options
from mlharness.tasks.base import AccuracyResult, TaskOptions, TensorSpec
from mlharness.tasks.imagenet_preprocessing import RESNET50
from mlharness.tasks.vision.cache import SampleCache, default_root
from mlharness.tasks.vision.image_set import ImageSetTask, Preprocess, confined
from mlharness.tasks.vision.preprocessing import ImagePreprocessor, resolve



def read_val_map(dataset_dir: Path, val_map: Path | None = None) -> list[tuple[str, int]]:
    """Read ``val_map.txt`` lines ``<file name> <label>`` in order (the QSL index order)."""
    path = val_map or dataset_dir / "val_map.txt"
    if not dataset_dir.is_dir():
        raise DatasetError(
            f"dataset directory not found: {dataset_dir}",
            hint="pass --dataset pointing at the folder holding the images and val_map.txt",
        )
    if not path.is_file():
        raise DatasetError(
            f"{path} not found",
            hint="an ImageNet-layout dataset needs val_map.txt: one '<image file> <label>' per line",
        )
    entries: list[tuple[str, int]] = []
    text = read_text_file(path, "val_map.txt", DatasetError)
    for line_no, line in enumerate(text.splitlines(), start=1):
        cols = line.split()
        if not cols:
            continue
        if len(cols) != 2 or not cols[1].lstrip("-").isdigit():
            raise DatasetError(
                f"{path}:{line_no}: expected '<image file> <label>', got {line!r}",
                hint="val_map.txt lines are a file name and an integer label separated by a space",
            )
        entries.append((confined(cols[0], f"{path}:{line_no}"), int(cols[1])))
    if not entries:
        raise DatasetError(f"{path} lists no images", hint="check that the file is not empty")
    return entries


@dataclass
class ClassifierOutput:
    """How to read the class from the model's outputs.

    ``name``: output tensor to read (None = the first one). If it holds integers it is taken as
    the class index; if floats with a class axis, its argmax. ``offset`` is added (ResNet50 ONNX
    has a background class at 0, so the reference uses offset -1).
    """

    name: str | None = None
    offset: int = 0


class ImageClassificationTask(ImageSetTask):
    """Top-1 classification over an ImageNet-layout folder."""

    list_name = "val_map.txt"
    missing_hint = "re-extract the dataset or regenerate val_map.txt"

    def __init__(
        self,
        name: str,
        loadgen_model: str,
        dataset_dir: Path,
        preprocess: Preprocess,
        input_spec: TensorSpec,
        output: ClassifierOutput,
        target: float | None,
        performance_count: int | None = None,
        max_samples: int | None = None,
        cache: SampleCache | None = None,
        prepare_workers: int | None = None,
        val_map: Path | None = None,
    ) -> None:
        # absolute: LoadGen's session changes the working directory before samples are loaded
        dataset_dir = Path(dataset_dir).expanduser().absolute()
        self.entries = read_val_map(dataset_dir,
                                    Path(val_map).expanduser().absolute() if val_map else None)
        if max_samples:
            self.entries = self.entries[:max_samples]
        self.output = output
        super().__init__(name, loadgen_model, dataset_dir, preprocess, input_spec, target,
                         performance_count, cache, prepare_workers)

    def total_count(self) -> int:
        return len(self.entries)

    def image_path(self, index: int) -> Path:
        return self.dataset_dir / self.entries[index][0]

    def predicted_classes(self, outputs: dict[str, np.ndarray]) -> np.ndarray:
        if self.output.name and self.output.name not in outputs:
            raise ModelError(
                f"model has no output {self.output.name!r} (it has {sorted(outputs)})",
                hint="export the model with the official output names, or set output_name",
            )
        raw = outputs[self.output.name] if self.output.name else next(iter(outputs.values()))
        if np.issubdtype(raw.dtype, np.integer):
            classes = raw.reshape(raw.shape[0], -1)[:, 0]
        else:
            classes = raw.reshape(raw.shape[0], -1).argmax(axis=1)
        return classes.astype(np.int64) + self.output.offset

    def encode_responses(
        self, indices: Sequence[int], outputs: dict[str, np.ndarray]
    ) -> list[bytes]:
        classes = self.predicted_classes(outputs).astype(np.float32)
        return [c.tobytes() for c in classes]

    def score(self, entries: list[tuple[int, bytes]]) -> AccuracyResult:
        """Top-1 as ``tools/accuracy-imagenet.py`` computes it: de-duplicated by qsl_idx."""
        seen: set[int] = set()
        good = 0
        for qsl_idx, data in entries:
            if qsl_idx in seen:
                continue
            seen.add(qsl_idx)
            found = int(np.frombuffer(data, np.float32)[0])
            if found == self.entries[qsl_idx][1]:
                good += 1
        total = len(seen)
        value = 100.0 * good / total if total else 0.0
        text = f"accuracy={value:.3f}%, good={good}, total={total}"
        return AccuracyResult(
            "acc", value, text, self.target, {"good": good, "total": total,
                                              "dataset_size": len(self.entries)}
        )

class ResNet50Options(Options):
    """``--task-option`` keys of resnet50 (for other exports of the model)."""

    preprocessing: str | dict[str, Any] | None = None  # preset name, table or .toml/.json file
    input_name: str = "input_tensor:0"
    output_name: str = "ArgMax:0"
    label_offset: int = -1
    val_map: str | None = None  # an image list elsewhere
    prepare_workers: Annotated[int, Field(ge=1)] | None = None


def create_resnet50(name: str, options: TaskOptions) -> ImageClassificationTask:
    """ResNet50 v1.5 (official ONNX: input float32 [N,3,224,224], ArgMax output with background).

    ``--task-option`` keys: :class:`ResNet50Options`.
    """
    opts = options.parsed(ResNet50Options)
    rules = options.require_rules(name)  # accuracy target and sample counts
    if options.dataset is None:
        raise DatasetError(
            "resnet50 needs --dataset", hint="pass the ImageNet val folder holding val_map.txt"
        )
    preprocess = ImagePreprocessor(resolve(opts.preprocessing, RESNET50))
    config = preprocess.config
    # python/main.py profile resnet50-onnxruntime: outputs "ArgMax:0", dataset "imagenet" whose
    # post-processor uses offset=-1 (class 0 of the TF/ONNX model is "background").
    task = ImageClassificationTask(
        name=name,
        loadgen_model=rules.loadgen_model,
        dataset_dir=Path(options.dataset),
        preprocess=preprocess,
        input_spec=TensorSpec(opts.input_name, "float32", (None, *config.output_shape)),
        output=ClassifierOutput(name=opts.output_name, offset=opts.label_offset),
        target=rules.accuracy_target,
        performance_count=rules.performance_sample_count,
        max_samples=options.max_samples,
        cache=SampleCache(default_root(options.cache_dir), preprocess,
                          describe={"preprocessing": config.to_dict()}),
        prepare_workers=opts.prepare_workers,
        val_map=Path(opts.val_map) if opts.val_map else None,
    )
    task.rules = rules
    return task
