"""A full-size synthetic ImageNet-layout set (50000 entries over a few distinct JPEGs, so the
accuracy run covers the round's dataset size) and a tiny ResNet50-signature model."""

from __future__ import annotations

from pathlib import Path

from synthetic_vision import make_imagenet, resnet50_onnx

DATASET_SIZE = 50000


def make_resnet_inputs(root: Path, distinct: int = 100, total: int = DATASET_SIZE) -> dict[str, Path]:
    """Dataset, model and a warm pre-processing cache under ``root``."""
    from mlharness.tasks import TaskOptions, create_task

    data, cache = root / "imagenet", root / "cache"
    entries = make_imagenet(data, count=distinct, seed=1)
    model = resnet50_onnx(root / "resnet50_tiny.onnx")
    # warm the cache on the distinct files only (its keys are the image files, not val_map.txt)
    create_task("resnet50", TaskOptions(dataset=data, cache_dir=cache)).prepare()
    lines = [f"{entries[i % distinct][0]} {(i * 7919) % 1000}\n" for i in range(total)]
    (data / "val_map.txt").write_text("".join(lines))
    return {"dataset": data, "cache": cache, "model": model}
