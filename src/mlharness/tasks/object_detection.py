"""Object detection on the OpenImages MLPerf subset (RetinaNet 800x800).

Responses are what the reference post-processor writes
(``python/openimages.py`` ``PostProcessOpenImagesRetinanet`` as configured by ``python/main.py``
for ``openimages-800-retinanet-onnx``): for each sample, float32 rows
``[qsl_idx, ymin, xmin, ymax, xmax, score, class]``. The model gives boxes as
``xmin, ymin, xmax, ymax`` in input pixels (0..800), sorted by score; rows are emitted until the
first score below 0.05, boxes divided by the input height/width; the class is the model's label
as is (no inverse label map). An image without detections gets an empty response. So our
``mlperf_log_accuracy.json`` scores the same with ``tools/accuracy-openimages.py``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, Sequence

import numpy as np
from pydantic import Field

from mlharness.errors import ConfigError, DatasetError, ModelError
from mlharness.options import Options
from mlharness.tasks.base import AccuracyResult, TaskOptions, TensorSpec
from mlharness.tasks.vision.cache import SampleCache, default_root
from mlharness.tasks.vision.coco_map import coco_accuracy
from mlharness.tasks.vision.image_set import ImageSetTask
from mlharness.tasks.vision.openimages import (ImageRecord, annotations_path, image_dir,
                                               read_images)
from mlharness.tasks.vision.preprocessing import RETINANET_800, ImagePreprocessor, resolve



@dataclass(frozen=True)
class DetectionOutputs:
    """How to read detections from the model's outputs.

    Defaults are the official ONNX export (``tools/retinanet_pytorch_to_onnx.py``: outputs
    ``boxes`` [N, 4], ``scores`` [N], ``labels`` [N] for one image). Outputs with a leading batch
    axis ([B, N, 4], [B, N], [B, N]) are read per sample.
    """

    boxes: str = "boxes"
    scores: str = "scores"
    labels: str = "labels"
    input_height: int = 800
    input_width: int = 800
    score_threshold: float = 0.05
    label_offset: int = 0


def detection_rows(qsl_idx: int, boxes: np.ndarray, scores: np.ndarray, labels: np.ndarray,
                   spec: DetectionOutputs) -> np.ndarray:
    """float32 [n, 7] rows for one image (n = detections before the first low score)."""
    low = np.flatnonzero(scores < spec.score_threshold)
    n = int(low[0]) if len(low) else len(scores)
    rows = np.empty((n, 7), dtype=np.float32)
    rows[:, 0] = float(qsl_idx)
    rows[:, 1] = boxes[:n, 1] / spec.input_height
    rows[:, 2] = boxes[:n, 0] / spec.input_width
    rows[:, 3] = boxes[:n, 3] / spec.input_height
    rows[:, 4] = boxes[:n, 2] / spec.input_width
    rows[:, 5] = scores[:n]
    rows[:, 6] = labels[:n].astype(np.int64) + spec.label_offset
    return rows


class ObjectDetectionTask(ImageSetTask):
    """Detection over an OpenImages-MLPerf-layout folder, scored with COCO mAP."""

    missing_hint = "re-run the download (tools/openimages_mlperf.sh) or fix the annotations"

    def __init__(
        self,
        name: str,
        loadgen_model: str,
        dataset_dir: Path,
        preprocess: ImagePreprocessor,
        input_spec: TensorSpec,
        outputs: DetectionOutputs,
        target: float | None,
        annotations: Path | None = None,
        performance_count: int | None = None,
        max_samples: int | None = None,
        cache: SampleCache | None = None,
        prepare_workers: int | None = None,
    ) -> None:
        # absolute: LoadGen's session changes the working directory before samples are loaded
        dataset_dir = Path(dataset_dir).expanduser().absolute()
        self.annotations = annotations_path(dataset_dir, annotations).absolute()
        self.images: list[ImageRecord] = read_images(self.annotations)
        self.image_dir = image_dir(dataset_dir, self.images[0])
        if max_samples:
            self.images = self.images[:max_samples]
        self.outputs = outputs
        self.list_name = self.annotations.name
        super().__init__(name, loadgen_model, dataset_dir, preprocess, input_spec, target,
                         performance_count, cache, prepare_workers)

    def total_count(self) -> int:
        return len(self.images)

    def image_path(self, index: int) -> Path:
        return self.image_dir / self.images[index].file_name

    def encode_responses(
        self, indices: Sequence[int], outputs: dict[str, np.ndarray]
    ) -> list[bytes]:
        spec = self.outputs
        missing = [n for n in (spec.boxes, spec.scores, spec.labels) if n not in outputs]
        if missing:
            raise ModelError(
                f"model has no output(s) {missing} (it has {sorted(outputs)})",
                hint="export the model with outputs boxes/scores/labels, or set the output names",
            )
        boxes, scores, labels = outputs[spec.boxes], outputs[spec.scores], outputs[spec.labels]
        if boxes.ndim == 2:  # one image without a batch axis (the official ONNX export)
            if len(indices) != 1:
                raise ModelError(
                    f"model returned detections for one image but was fed {len(indices)}",
                    hint="the official RetinaNet ONNX takes one image at a time: "
                         "use --batch-size 1",
                )
            boxes, scores, labels = boxes[None], scores[None], labels[None]
        return [detection_rows(idx, boxes[b], scores[b], labels[b], spec).tobytes()
                for b, idx in enumerate(indices)]

    def score(self, entries: list[tuple[int, bytes]]) -> AccuracyResult:
        """COCO mAP as ``tools/accuracy-openimages.py`` computes it."""
        return coco_accuracy(self.annotations, entries, self.images, self.target)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "annotations": str(self.annotations),
                "outputs": asdict(self.outputs)}


class RetinaNetOptions(Options):
    """``--task-option`` keys of retinanet (for other exports of the model)."""

    preprocessing: str | dict[str, Any] | None = None  # preset name, table or .toml/.json file
    input_name: str = "images"
    outputs: dict[str, Any] | None = None  # a table of DetectionOutputs keys
    annotations: str | None = None
    prepare_workers: Annotated[int, Field(ge=1)] | None = None


def create_retinanet(name: str, options: TaskOptions) -> ObjectDetectionTask:
    """RetinaNet 800x800 (official ONNX: input ``images`` float32 [1, 3, 800, 800]).

    ``--task-option`` keys: :class:`RetinaNetOptions`.
    """
    opts = options.parsed(RetinaNetOptions)
    rules = options.require_rules(name)  # accuracy target and sample counts
    if options.dataset is None:
        raise DatasetError("retinanet needs --dataset",
                           hint="pass the OpenImages MLPerf folder holding annotations/")
    preprocess = ImagePreprocessor(resolve(opts.preprocessing, RETINANET_800))
    config = preprocess.config
    table = dict(opts.outputs or {})
    table.setdefault("input_height", config.height)
    table.setdefault("input_width", config.width)
    try:
        outputs = DetectionOutputs(**table)
    except TypeError as exc:
        raise ConfigError(f"bad detection outputs table: {exc}",
                          hint="keys: boxes, scores, labels, input_height, input_width, "
                               "score_threshold, label_offset") from exc
    task = ObjectDetectionTask(
        name=name,
        loadgen_model=rules.loadgen_model,
        dataset_dir=Path(options.dataset),
        preprocess=preprocess,
        input_spec=TensorSpec(opts.input_name, "float32", (None, *config.output_shape)),
        outputs=outputs,
        target=rules.accuracy_target,
        annotations=Path(opts.annotations) if opts.annotations else None,
        performance_count=rules.performance_sample_count,
        max_samples=options.max_samples,
        cache=SampleCache(default_root(options.cache_dir), preprocess,
                          describe={"preprocessing": config.to_dict()}),
        prepare_workers=opts.prepare_workers,
    )
    task.rules = rules
    return task
