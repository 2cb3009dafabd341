"""RetinaNet responses and COCO mAP on hand-built detections whose answer is known."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import referee
from mlharness.errors import DatasetError, ModelError
from mlharness.tasks import TaskOptions, create_task
from mlharness.tasks.object_detection import DetectionOutputs, detection_rows

OFFICIAL = "vision/classification_and_detection/tools/accuracy-openimages.py"
SPEC = DetectionOutputs()

#: image id -> (height, width, [(category, [x, y, w, h]), ...])
GROUND_TRUTH = {
    1: (400, 400, [(0, [100.0, 100.0, 100.0, 100.0])]),
    2: (300, 600, [(1, [50.0, 60.0, 200.0, 100.0]), (2, [300.0, 100.0, 100.0, 150.0])]),
}


def write_dataset(root: Path) -> Path:
    """Annotations only (mAP needs no pixels) in the official layout."""
    images, anns = [], []
    for image_id, (h, w, boxes) in GROUND_TRUTH.items():
        images.append({"id": image_id, "file_name": f"{image_id}.jpg", "height": h, "width": w})
        for cat, bbox in boxes:
            anns.append({"id": len(anns) + 1, "image_id": image_id, "category_id": cat,
                         "bbox": bbox, "area": bbox[2] * bbox[3], "iscrowd": 0})
    (root / "annotations").mkdir(parents=True)
    (root / "validation" / "data").mkdir(parents=True)
    for image in images:
        (root / "validation" / "data" / image["file_name"]).write_bytes(b"")
    data = {"images": images, "annotations": anns,
            "categories": [{"id": c, "name": f"c{c}"} for c in range(3)]}
    path = root / "annotations" / "openimages-mlperf.json"
    path.write_text(json.dumps(data))
    return path


def rows_for(qsl_idx: int, image_id: int, shift: float = 0.0) -> bytes:
    """The image's ground-truth boxes as response rows, moved right by ``shift`` x their width."""
    h, w, boxes = GROUND_TRUTH[image_id]
    rows = [[qsl_idx, y / h, (x + shift * bw) / w, (y + bh) / h, (x + (1 + shift) * bw) / w,
             0.9, cat] for cat, (x, y, bw, bh) in boxes]
    return np.array(rows, np.float32).tobytes()


@pytest.fixture
def task(tmp_path: Path):
    write_dataset(tmp_path / "oi")
    return create_task("retinanet", TaskOptions(dataset=tmp_path / "oi", cache_dir=tmp_path / "c"))


def write_log(path: Path, entries: list[tuple[int, bytes]]) -> Path:
    path.write_text(json.dumps([{"seq_id": i, "qsl_idx": q, "data": d.hex().upper()}
                                for i, (q, d) in enumerate(entries)]))
    return path


def official_map(tmp_path: Path, entries: list[tuple[int, bytes]]) -> str:
    log = write_log(tmp_path / "mlperf_log_accuracy.json", entries)
    out = referee.run(OFFICIAL, "--mlperf-accuracy-file", str(log), "--openimages-dir",
                      str(tmp_path / "oi"), "--output-file", str(tmp_path / "official.json"),
                      check=True).stdout
    return [line for line in out.splitlines() if line.startswith("mAP=")][0]


def test_rows_stop_at_the_first_low_score_and_normalise() -> None:
    boxes = np.array([[80, 40, 400, 200], [0, 0, 800, 800], [1, 2, 3, 4], [8, 8, 16, 16]],
                     np.float32)
    scores = np.array([0.9, 0.5, 0.04, 0.6], np.float32)  # the reference stops at 0.04
    labels = np.array([7, 263, 1, 2], np.int64)
    rows = detection_rows(5, boxes, scores, labels, SPEC)
    assert rows.dtype == np.float32 and rows.shape == (2, 7)
    np.testing.assert_array_equal(rows[0], np.array([5, 0.05, 0.1, 0.25, 0.5, 0.9, 7], np.float32))
    np.testing.assert_array_equal(rows[1], np.array([5, 0, 0, 1, 1, 0.5, 263], np.float32))
    empty = detection_rows(1, boxes, np.array([0.01, 0.9, 0.9, 0.9], np.float32), labels, SPEC)
    assert empty.tobytes() == b""


def test_encode_responses_single_and_batched(task) -> None:
    boxes = np.array([[0, 0, 400, 400]], np.float32)
    one = {"boxes": boxes, "scores": np.array([0.7], np.float32), "labels": np.array([1])}
    [payload] = task.encode_responses([1], one)
    assert np.frombuffer(payload, np.float32).tolist() == pytest.approx([1, 0, 0, .5, .5, .7, 1])
    with pytest.raises(ModelError, match="batch-size 1"):
        task.encode_responses([0, 1], one)
    batched = {k: np.stack([v, v]) for k, v in one.items()}
    batched["scores"][1] = 0.01  # second image: nothing above the threshold
    first, second = task.encode_responses([0, 1], batched)
    assert len(first) == 28 and second == b""
    with pytest.raises(ModelError, match="no output"):
        task.encode_responses([0], {"boxes": boxes})


def test_perfect_detections_score_100(task) -> None:
    result = task.score([(0, rows_for(0, 1)), (1, rows_for(1, 2))])
    assert result.text.splitlines()[-1] == "mAP=100.000%"
    assert result.metric == "mAP" and result.passed is True


def test_shifted_boxes_score_50(task) -> None:
    # moved by 16% of the width: IoU = 84/116 = 0.724, a hit at IoU 0.50..0.70 (5 of 10 thresholds)
    result = task.score([(0, rows_for(0, 1, 0.16)), (1, rows_for(1, 2, 0.16))])
    assert result.value == pytest.approx(50.0)
    assert result.text.endswith("mAP=50.000%")
    # moved by 30%: IoU = 0.538, a hit only at 0.50 -> 10%, below the 37.17 target
    low = task.score([(0, rows_for(0, 1, 0.3)), (1, rows_for(1, 2, 0.3))])
    assert low.value == pytest.approx(10.0) and low.passed is False


def test_missing_detections_and_duplicates(task) -> None:
    # image 2 answered empty: classes 1 and 2 get AP 0, class 0 AP 1 -> 33.333%
    entries = [(0, rows_for(0, 1)), (1, b""), (1, rows_for(1, 2))]  # the duplicate is ignored
    result = task.score(entries)
    assert result.text.endswith("mAP=33.333%")
    assert result.details["no_results"] == 1 and result.details["duplicates"] == 1
    assert task.score([(1, b"")]).value == 0.0  # nothing detected at all


@referee.official(OFFICIAL, python=True)
@pytest.mark.parametrize("entries", [
    [(0, rows_for(0, 1)), (1, rows_for(1, 2))],
    [(0, rows_for(0, 1, 0.16)), (1, rows_for(1, 2, 0.3))],
    [(1, rows_for(1, 2, 0.05)), (0, b""), (1, b"")],
])
def test_equal_to_the_official_script(task, tmp_path: Path, entries) -> None:
    ours = task.score(entries).text.splitlines()[-1]
    assert ours == official_map(tmp_path, entries)


def test_layouts_and_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ann = write_dataset(tmp_path / "oi")
    flat = tmp_path / "flat"
    flat.mkdir()
    for image_id in GROUND_TRUTH:
        (flat / f"{image_id}.jpg").write_bytes(b"")
    monkeypatch.setenv("DATASET_ANNOTATIONS_FILE_PATH", str(ann))
    task = create_task("retinanet", TaskOptions(dataset=flat))
    assert task.image_dir == flat.absolute() and task.total_count() == 2
    assert task.model_inputs[0].name == "images"
    assert task.model_inputs[0].shape == (None, 3, 800, 800)
    monkeypatch.delenv("DATASET_ANNOTATIONS_FILE_PATH")
    with pytest.raises(DatasetError, match="annotation file not found"):
        create_task("retinanet", TaskOptions(dataset=flat))
    (tmp_path / "oi" / "validation" / "data" / "2.jpg").unlink()
    task = create_task("retinanet", TaskOptions(dataset=tmp_path / "oi", max_samples=5))
    with pytest.raises(DatasetError, match="1 image"):
        task.prepare()
    with pytest.raises(DatasetError, match="needs --dataset"):
        create_task("retinanet", TaskOptions())
