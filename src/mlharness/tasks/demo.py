"""The embedded demo benchmark: UCI digits (8x8 greyscale) in the ImageNet layout + a small ONNX MLP.

It is an ordinary image-classification task; only its files ship with the package
(``mlharness/data/demo``, rebuilt by ``tools/train_demo_model.py``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from mlharness.options import NoOptions
from mlharness.tasks.base import TaskOptions, TensorSpec
from mlharness.tasks.image_classification import ClassifierOutput, ImageClassificationTask

DEMO_DIR = Path(__file__).resolve().parents[1] / "data" / "demo"
DEMO_DATASET = DEMO_DIR / "dataset"
DEMO_MODEL = DEMO_DIR / "digits_mlp.onnx"


def digits_preprocess(path: Path) -> np.ndarray:
    """8-bit greyscale PNG -> float32 [1, 8, 8] in 0..1 (what the MLP was trained on)."""
    with Image.open(path) as img:
        pixels = np.asarray(img.convert("L"), dtype=np.float32)
    return (pixels / 255.0)[np.newaxis]


def create(name: str, options: TaskOptions) -> ImageClassificationTask:
    options.parsed(NoOptions)  # the demo takes no --task-option
    task = ImageClassificationTask(
        name=name,
        loadgen_model="demo",
        dataset_dir=Path(options.dataset) if options.dataset else DEMO_DATASET,
        preprocess=digits_preprocess,
        input_spec=TensorSpec("image", "float32", (None, 1, 8, 8)),
        output=ClassifierOutput(name="label", offset=0),
        target=90.0,
        max_samples=options.max_samples,
    )
    task.default_model = DEMO_MODEL
    return task
