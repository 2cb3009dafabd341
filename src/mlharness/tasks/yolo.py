"""YOLO-95 / YOLO-99: YOLO11-L on COCO val2017's licence-safe subset, scored by COCO mAP.

The reference (``vision/classification_and_detection/yolo/yolo_loadgen.py``) runs ultralytics on
one image file per sample; this task makes the same detections without ultralytics, on the
model's ONNX export (onnxruntime, OpenVINO): the letterbox of :mod:`.vision.letterbox`, the
confidence filter, NMS and COCO-91 rows of :mod:`.vision.yolo_postprocess`. Batched: samples of
one letterboxed shape go to the runtime together (:meth:`YoloTask.infer`), so an export with
dynamic height and width gets the reference's per-image rectangle (``rect``) and a batch of
several images at once. A model of fixed input size (e.g. 640 x 640) gets the square letterbox
ultralytics gives such a model. mAP is ``tools/accuracy-coco.py``'s (the README's recommended
scorer; the checker reads its ``mAP=`` line), on the dataset's annotation file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Iterator, Sequence

import numpy as np
from pydantic import Field

from mlharness.errors import ConfigError, DatasetError, ModelError
from mlharness.options import Options
from mlharness.tasks.base import AccuracyResult, Predict, TaskOptions, TensorSpec
from mlharness.tasks.vision.cache import SampleCache, default_root
from mlharness.tasks.vision.coco_map import coco_accuracy
from mlharness.tasks.vision.coco_safe import annotations_path, image_dir
from mlharness.tasks.vision.image_set import ImageSetTask
from mlharness.tasks.vision.letterbox import (LetterboxConfig, LetterboxPreprocessor,
                                              boxed_shape, model_input, placement, unpack)
from mlharness.tasks.vision.openimages import ImageRecord, read_images
from mlharness.tasks.vision.yolo_postprocess import NmsSettings, detect, response_rows

#: the exported model's input and output (ultralytics' ONNX export)
INPUT = "images"
OUTPUT = "output0"


class YoloTask(ImageSetTask):
    """Detection over the COCO safe subset's folder, batched by letterboxed shape."""

    list_name = "annotations/instances_val2017.json"
    missing_hint = "`mlharness get coco-safe --from DIR` builds the subset from COCO val2017"

    def __init__(self, name: str, dataset_dir: Path, letterbox: LetterboxConfig,
                 nms: NmsSettings, target: float | None, loadgen_model: str = "yolo",
                 annotations: Path | None = None,
                 performance_count: int | None = None, max_samples: int | None = None,
                 cache: SampleCache | None = None, prepare_workers: int | None = None) -> None:
        dataset_dir = Path(dataset_dir).expanduser().absolute()
        self.annotations = annotations_path(dataset_dir, annotations).absolute()
        self.images: list[ImageRecord] = read_images(self.annotations)
        self.image_dir = image_dir(dataset_dir, self.images[0].file_name)
        if max_samples:
            self.images = self.images[:max_samples]
        self.letterbox = letterbox
        self.nms = nms
        side = None if letterbox.rect else letterbox.imgsz
        spec = TensorSpec(INPUT, "float32", (None, 3, side, side))
        super().__init__(name, loadgen_model, dataset_dir, LetterboxPreprocessor(letterbox), spec,
                         target, performance_count, cache, prepare_workers)

    def total_count(self) -> int:
        return len(self.images)

    def image_path(self, index: int) -> Path:
        return self.image_dir / self.images[index].file_name

    def shape_of(self, index: int) -> tuple[int, int]:
        """Sample ``index``'s letterboxed (h, w): from the loaded sample, else from the
        annotation's size (equal unless the file's EXIF turns it)."""
        sample = self._loaded.get(index)
        if sample is not None:
            return boxed_shape(sample)
        image = self.images[index]
        return placement(image.height, image.width, self.letterbox).shape

    def sample_length(self, index: int) -> int:
        """The letterboxed shape as one number (height, then width), so Offline's length sort
        puts samples of one shape side by side and a batch is mostly one runtime call."""
        h, w = self.shape_of(index)
        return h << 16 | w

    def groups(self, indices: Sequence[int]) -> list[list[int]]:
        """``indices`` split by letterboxed shape, in order of first appearance."""
        by_shape: dict[tuple[int, int], list[int]] = {}
        for i in indices:
            by_shape.setdefault(self.shape_of(i), []).append(i)
        return list(by_shape.values())

    def batch_inputs(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
        boxed = [unpack(self._loaded[i])[1] for i in indices]
        if len({b.shape for b in boxed}) > 1:
            raise ModelError("samples of different letterboxed shapes in one batch",
                             hint="a YOLO batch goes through YoloTask.infer, which splits it by "
                                  "shape")
        return {INPUT: model_input(boxed)}

    def encode_responses(self, indices: Sequence[int],
                         outputs: dict[str, np.ndarray]) -> list[bytes]:
        if OUTPUT not in outputs:
            raise ModelError(f"model has no output {OUTPUT!r} (it has {sorted(outputs)})",
                             hint="export with ultralytics: yolo export model=yolo11l.pt "
                                  "format=onnx dynamic=True")
        raw = outputs[OUTPUT]
        if raw.ndim != 3 or raw.shape[0] != len(indices) or raw.shape[1] < 5:
            raise ModelError(f"output {OUTPUT!r} has shape {list(raw.shape)} for a batch of "
                             f"{len(indices)}; a YOLO detection export gives [batch, 84, anchors]",
                             hint="use the detection model's export (not the end-to-end or "
                                  "segmentation variants)")
        out = []
        for row, idx in zip(raw, indices):
            original, boxed = unpack(self._loaded[idx])
            found = detect(row, boxed.shape[:2], original, self.nms)
            out.append(response_rows(idx, found, original).tobytes())
        return out

    def infer(self, predict: Predict, indices: Sequence[int]) -> list[bytes]:
        """One runtime call per letterboxed shape among ``indices``; answers in their order."""
        answers: dict[int, bytes] = {}
        for group in self.groups(indices):
            for i, payload in zip(group, self.encode_responses(
                    group, predict(self.batch_inputs(group)))):
                answers[i] = payload
        return [answers[i] for i in indices]

    def model_batches(self, indices: Sequence[int]) -> Iterator[dict[str, np.ndarray]]:
        for group in self.groups(indices):
            yield self.batch_inputs(group)

    def kept_fp32(self, ops: list[tuple[str, str]]) -> list[str]:
        """The detection head's box decoding, as ultralytics' own int8 export keeps it
        (ultralytics 8.4.190 ``utils/export/openvino.py``: the head's own operations, its DFL
        and its class sigmoid): in int8, box coordinates of up to 640 pixels and the DFL's
        weights 0..15 would be rounded to a few percent. The head is the scope of the model's
        last Sigmoid (``/model.23`` in an ONNX export of YOLO11); its convolutions (``cv2``,
        ``cv3``) are quantised."""
        sigmoids = [name for name, kind in ops if kind == "Sigmoid"]
        if not sigmoids or "/" not in sigmoids[-1]:
            return []
        head = sigmoids[-1].rsplit("/", 1)[0] + "/"
        return [name for name, _ in ops if name.startswith(head)
                and ("/" not in name[len(head):] or name[len(head):].startswith("dfl"))]

    def warmup_batches(self, batch: list[int]) -> list[list[int]]:
        """A batch of ``len(batch)`` per letterboxed shape of the dataset (from the annotations'
        sizes), so a runtime builds each shape's kernels before LoadGen starts."""
        first: dict[tuple[int, int], int] = {}
        for i, image in enumerate(self.images):
            first.setdefault(placement(image.height, image.width, self.letterbox).shape, i)
        return [[i] * len(batch) for i in first.values()]

    def score(self, entries: list[tuple[int, bytes]]) -> AccuracyResult:
        """COCO mAP as ``tools/accuracy-coco.py`` computes it."""
        return coco_accuracy(self.annotations, entries, self.images, self.target)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "annotations": str(self.annotations),
                "letterbox": self.letterbox.to_dict(), "nms": self.nms.to_dict()}


class YoloOptions(Options):
    """``--task-option`` keys of yolo-95 / yolo-99."""

    #: letterbox to the stride (true: the reference's .pt run, an export with dynamic height
    #: and width) or to imgsz x imgsz (false: a fixed-size export); default: what the model's
    #: input shape asks for
    rect: bool | None = None
    imgsz: Annotated[int, Field(ge=32)] = 640
    annotations: str | None = None
    prepare_workers: Annotated[int, Field(ge=1)] | None = None


def letterbox_for(opts: YoloOptions, inputs: list[TensorSpec] | None) -> LetterboxConfig:
    """The letterbox a model needs: a fixed square input -> that square; else the rectangle."""
    declared = next((t for t in inputs or [] if t.name == INPUT), None)
    dims = declared.shape[2:] if declared is not None and len(declared.shape) == 4 else ()
    h, w = (dims[0], dims[1]) if len(dims) == 2 else (None, None)
    if h is not None and w is not None:
        if h != w:
            raise ModelError(f"model input {INPUT!r} is {h} x {w}; YOLO's letterbox is square",
                             hint="export with imgsz=640 (or dynamic=True)")
        if opts.rect:
            raise ConfigError(f"rect=true needs a model of free height and width; this one "
                              f"takes {h} x {w}", hint="drop rect=true, or export dynamic=True")
        return LetterboxConfig(imgsz=int(h), rect=False)
    return LetterboxConfig(imgsz=opts.imgsz, rect=True if opts.rect is None else opts.rect)


def create(name: str, options: TaskOptions) -> YoloTask:
    """yolo-95 / yolo-99 on the COCO safe subset (``--dataset``: the folder holding
    ``annotations/instances_val2017.json`` and ``val2017_safe/``). ``--task-option`` keys:
    :class:`YoloOptions`."""
    opts = options.parsed(YoloOptions)
    rules = options.require_rules(name)  # loadgen model, accuracy target, performance count
    if options.dataset is None:
        raise DatasetError(f"{name} needs --dataset",
                           hint="the COCO safe subset's folder (`mlharness get coco-safe`)")
    letterbox = letterbox_for(opts, options.model_inputs)
    task = YoloTask(
        name=name,
        dataset_dir=Path(options.dataset),
        letterbox=letterbox,
        nms=NmsSettings(),
        target=rules.accuracy_target,
        loadgen_model=rules.loadgen_model,
        annotations=Path(opts.annotations) if opts.annotations else None,
        performance_count=rules.performance_sample_count,
        max_samples=options.max_samples,
        cache=SampleCache(default_root(options.cache_dir), LetterboxPreprocessor(letterbox),
                          describe={"preprocessing": letterbox.to_dict()}),
        prepare_workers=opts.prepare_workers,
    )
    task.rules = rules
    return task
