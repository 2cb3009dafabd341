"""The ResNet50 task on a synthetic ImageNet-layout set: inputs, responses, top-1 scoring."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import referee
from mlharness.errors import DatasetError, ModelError
from mlharness.tasks import TaskOptions, create_task
from synthetic_vision import make_imagenet

OFFICIAL = "vision/classification_and_detection/tools/accuracy-imagenet.py"


@pytest.fixture
def imagenet(tmp_path: Path) -> Path:
    make_imagenet(tmp_path / "val", count=8)
    return tmp_path / "val"


def test_task_shape_and_counts(imagenet: Path, tmp_path: Path) -> None:
    task = create_task("resnet50", TaskOptions(dataset=imagenet, cache_dir=tmp_path / "c"))
    assert task.loadgen_model == "resnet50"
    [spec] = task.model_inputs
    assert (spec.name, spec.dtype, spec.shape) == ("input_tensor:0", "float32", (None, 3, 224, 224))
    assert task.total_count() == 8 and task.performance_count() == 8  # min(1024, dataset)
    task.prepare()
    task.load_samples([3, 1])
    batch = task.batch_inputs([1, 3])["input_tensor:0"]
    assert batch.shape == (2, 3, 224, 224) and batch.dtype == np.float32
    task.unload_samples([1, 3])
    assert task.describe()["preprocessing"]["interpolation"] == "area"


def test_responses_apply_the_background_offset(imagenet: Path) -> None:
    task = create_task("resnet50", TaskOptions(dataset=imagenet))
    out = {"ArgMax:0": np.array([1, 1000], np.int64), "softmax_tensor:0": np.zeros((2, 1001))}
    payloads = task.encode_responses([0, 1], out)
    assert [np.frombuffer(p, np.float32).tolist() for p in payloads] == [[0.0], [999.0]]
    with pytest.raises(ModelError, match="ArgMax:0"):
        task.encode_responses([0], {"softmax_tensor:0": np.zeros((1, 1001), np.float32)})
    probs = create_task("resnet50", TaskOptions(dataset=imagenet,
                                                extra={"output_name": "softmax_tensor:0"}))
    soft = np.zeros((1, 1001), np.float32)
    soft[0, 5] = 1
    [p] = probs.encode_responses([0], {"softmax_tensor:0": soft})
    assert np.frombuffer(p, np.float32).tolist() == [4.0]


def log_entries(labels: list[int]) -> list[tuple[int, bytes]]:
    """Right for even indices, wrong for odd ones, plus a duplicate of index 1 saying right."""
    entries = [(i, np.float32(lab if i % 2 == 0 else lab + 1).tobytes())
               for i, lab in enumerate(labels)]
    return entries + [(1, np.float32(labels[1]).tobytes())]


def test_top1_deduplicates_like_the_official_script(imagenet: Path) -> None:
    labels = [lab for _, lab in make_imagenet(imagenet, count=8)]
    task = create_task("resnet50", TaskOptions(dataset=imagenet))
    result = task.score(log_entries(labels))
    assert result.text == "accuracy=50.000%, good=4, total=8"
    assert result.passed is False and result.target == pytest.approx(75.6954)


@referee.official(OFFICIAL, python=True)
def test_equal_to_the_official_script(imagenet: Path, tmp_path: Path) -> None:
    labels = [lab for _, lab in make_imagenet(imagenet, count=8)]
    entries = log_entries(labels)
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text(json.dumps([{"seq_id": n, "qsl_idx": i, "data": d.hex().upper()}
                               for n, (i, d) in enumerate(entries)]))
    out = referee.run(OFFICIAL, "--mlperf-accuracy-file", str(log), "--imagenet-val-file",
                      str(imagenet / "val_map.txt"), check=True).stdout.strip()
    task = create_task("resnet50", TaskOptions(dataset=imagenet))
    assert task.score(entries).text == out


def test_dataset_errors(tmp_path: Path, imagenet: Path) -> None:
    with pytest.raises(DatasetError, match="val_map.txt"):
        create_task("resnet50", TaskOptions(dataset=tmp_path))
    with pytest.raises(DatasetError, match="needs --dataset"):
        create_task("resnet50", TaskOptions())
    (imagenet / "ILSVRC2012_val_00000003.JPEG").unlink()
    task = create_task("resnet50", TaskOptions(dataset=imagenet, cache_dir=tmp_path / "c"))
    with pytest.raises(DatasetError, match="1 image"):
        task.prepare()


def test_max_samples_other_list_and_demo(imagenet: Path, tmp_path: Path) -> None:
    task = create_task("resnet50", TaskOptions(dataset=imagenet, max_samples=3))
    assert task.total_count() == 3
    subset = tmp_path / "subset.txt"
    subset.write_text("ILSVRC2012_val_00000002.JPEG 7\n")
    task = create_task("resnet50", TaskOptions(dataset=imagenet, extra={"val_map": str(subset)}))
    assert task.entries == [("ILSVRC2012_val_00000002.JPEG", 7)]
    demo = create_task("demo", TaskOptions())
    demo.prepare()
    demo.load_samples([0])
    assert demo.batch_inputs([0])["image"].shape == (1, 1, 8, 8)
