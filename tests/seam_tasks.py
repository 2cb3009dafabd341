"""A throw-away benchmark built the way docs/architecture.md ("Add a benchmark") says, for
tests/test_seam.py: the demo's digits classified as an ensemble of the image and two shifted
copies, so each batch of samples takes three backend calls through the inference seam
(``TensorTask.infer``), and a variant that runs under resnet50's rules."""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from mlharness.tasks.base import Predict, TaskOptions
from mlharness.tasks.demo import create as create_demo
from mlharness.tasks.image_classification import ImageClassificationTask

SHIFTS = (0, 1, -1)  # columns each copy of an image is rolled by


class ShiftedDigits(ImageClassificationTask):
    """The demo task, its answer the argmax of the logits summed over shifted copies."""

    def model_batches(self, indices: Sequence[int]) -> Iterator[dict[str, np.ndarray]]:
        images = self.batch_inputs(indices)["image"]
        for shift in SHIFTS:
            yield {"image": np.ascontiguousarray(np.roll(images, shift, axis=-1))}

    def infer(self, predict: Predict, indices: Sequence[int]) -> list[bytes]:
        total = sum(predict(inputs)["logits"] for inputs in self.model_batches(indices))
        classes = np.asarray(total).argmax(axis=1).astype(np.float32)
        return [c.tobytes() for c in classes]


def shifted(name: str, options: TaskOptions) -> ShiftedDigits:
    task = create_demo(name, options)
    task.__class__ = ShiftedDigits  # the demo's data and scoring, this class's seam
    return task  # type: ignore[return-value]


def variant(name: str, options: TaskOptions) -> ImageClassificationTask:
    """A task that runs under the rules its entry borrows (the test names resnet50's)."""
    task = create_demo(name, TaskOptions(dataset=options.dataset))
    task.rules = options.require_rules(name)
    return task
