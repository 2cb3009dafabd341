"""yolo-95 / yolo-99 without the referee: the round's facts, the licence filter, letterbox
geometry, the choice of letterbox from the model's input, batching by shape."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from mlharness.errors import ConfigError, DatasetError, ModelError
from mlharness.rules import rules_for
from mlharness.tasks import TaskOptions, TensorSpec, create_task
from mlharness.tasks.vision.coco_safe import safe_annotations
from mlharness.tasks.vision.letterbox import LetterboxConfig, placement
from mlharness.tasks.vision.yolo_postprocess import NmsSettings, detect, nms, response_rows
from mlharness.tasks.yolo import YoloOptions, letterbox_for


def test_round_facts() -> None:
    for name, fraction in (("yolo-95", 0.95), ("yolo-99", 0.99)):
        f = rules_for(name, "v6.1")
        assert f.loadgen_model == "yolo" and f.accuracy_metric == "mAP"
        assert f.accuracy_target == pytest.approx(53.4 * fraction)
        assert (f.dataset_size, f.performance_sample_count) == (1525, 64)
        assert f.compliance_tests == ("TEST01",)
        assert f.scenarios_for("edge") == ("SingleStream", "MultiStream", "Offline")
        assert f.accuracy_value("mAP=51.234%") == pytest.approx(51.234)


def test_safe_licences() -> None:
    urls = {1: "http://creativecommons.org/licenses/by-nc-sa/2.0/",
            2: "http://creativecommons.org/licenses/by-nc/2.0/",
            3: "http://creativecommons.org/licenses/by-nc-nd/2.0/",
            4: "http://creativecommons.org/licenses/by/2.0/",
            5: "http://creativecommons.org/licenses/by-sa/2.0/",
            6: "http://creativecommons.org/licenses/by-nd/2.0/",
            7: "http://flickr.com/commons/usage/",
            8: "http://www.usa.gov/copyright.shtml"}
    coco = {"info": {"v": 1}, "licenses": [{"id": k, "url": u} for k, u in urls.items()],
            "images": [{"id": 10 + k, "license": k} for k in (8, 1, 4, 2, 5, 3, 6, 7)],
            "annotations": [{"id": 1, "image_id": 11}, {"id": 2, "image_id": 18},
                            {"id": 3, "image_id": 14}],
            "categories": [{"id": 1}]}
    out = safe_annotations(coco)
    assert [i["id"] for i in out["images"]] == [18, 14, 15, 16, 17]  # file order kept
    assert [a["id"] for a in out["annotations"]] == [2, 3]
    assert list(out) == ["info", "licenses", "images", "annotations", "categories"]


@pytest.mark.parametrize("h0, w0, rect, shape, pads", [
    (480, 640, True, (480, 640), (0, 0, 0, 0)),
    (427, 640, True, (448, 640), (10, 11, 0, 0)),
    (1080, 810, True, (640, 480), (0, 0, 0, 0)),
    (600, 512, True, (640, 576), (0, 0, 15, 15)),
    (90, 140, True, (416, 640), (2, 3, 0, 0)),  # scaled up: 411 rows, 5 of padding
    (427, 640, False, (640, 640), (106, 107, 0, 0)),
])
def test_letterbox_geometry(h0, w0, rect, shape, pads) -> None:
    place = placement(h0, w0, LetterboxConfig(rect=rect))
    assert place.shape == shape
    assert (place.top, place.bottom, place.left, place.right) == pads


def test_letterbox_follows_the_model_input() -> None:
    dynamic = [TensorSpec("images", "float32", (None, 3, None, None))]
    fixed = [TensorSpec("images", "float32", (1, 3, 640, 640))]
    assert letterbox_for(YoloOptions(), dynamic) == LetterboxConfig(rect=True)
    assert letterbox_for(YoloOptions(), None) == LetterboxConfig(rect=True)
    assert letterbox_for(YoloOptions(rect=False), dynamic) == LetterboxConfig(rect=False)
    assert letterbox_for(YoloOptions(), fixed) == LetterboxConfig(rect=False)
    with pytest.raises(ConfigError, match="free height and width"):
        letterbox_for(YoloOptions(rect=True), fixed)
    with pytest.raises(ModelError, match="square"):
        letterbox_for(YoloOptions(), [TensorSpec("images", "float32", (1, 3, 640, 480))])


def test_nms_keeps_by_score_and_class() -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 1, 10, 10], [0, 0, 10, 10], [50, 50, 60, 60]],
                     np.float32)
    scores = np.array([0.5, 0.9, 0.8, 0.1], np.float32)
    assert nms(boxes, scores, 0.7, 300).tolist() == [1, 3]
    assert nms(boxes, scores, 0.7, 1).tolist() == [1]
    # raw output: 2 anchors, 3 classes; the second below conf -> one row, COCO id of class 2 = 3
    raw = np.array([[320, 100], [240, 100], [64, 10], [48, 10],
                    [0.1, 0.0005], [0.2, 0.0001], [0.6, 0.0002]], np.float32)
    found = detect(raw, (480, 640), (480, 640), NmsSettings())
    rows = response_rows(7, found, (480, 640))
    np.testing.assert_allclose(rows, [[7, 0.45, 0.45, 0.55, 0.55, 0.6, 3]], rtol=1e-6)


def sequential_nms(boxes: np.ndarray, scores: np.ndarray, iou: float, limit: int) -> list[int]:
    """torchvision's CPU kernel as a plain loop (float32 IoU, compared as a double)."""
    order = np.argsort(-scores, kind="stable")
    x1, y1, x2, y2 = boxes.T
    areas = (x2 - x1) * (y2 - y1)
    dropped = np.zeros(len(order), dtype=bool)
    keep: list[int] = []
    for a, i in enumerate(order):
        if dropped[i]:
            continue
        keep.append(int(i))
        for j in order[a + 1:]:
            if dropped[j]:
                continue
            w = max(np.float32(0), min(x2[i], x2[j]) - max(x1[i], x1[j]))
            h = max(np.float32(0), min(y2[i], y2[j]) - max(y1[i], y1[j]))
            inter = w * h
            if float(inter / (areas[i] + areas[j] - inter)) > iou:
                dropped[j] = True
    return keep[:limit]


def test_vectorised_nms_equals_the_sequential_loop() -> None:
    """Blocks, ties (scores of one decimal), boxes on a grid (IoU exactly at 0.7 and equal
    boxes), chains across block borders, the limit inside a block; torchvision itself:
    test_yolo_reference.py."""
    rng = np.random.default_rng(3)
    for trial in range(40):
        n = int(rng.choice([1, 2, 63, 64, 65, 130, 300]))
        xy = rng.uniform(0, 100, (n, 2))
        wh = rng.uniform(2, 40, (n, 2))
        if trial % 2:
            xy, wh = np.round(xy / 10) * 10, np.round(wh / 10) * 10 + 10
        boxes = np.concatenate([xy, xy + wh], 1).astype(np.float32)
        scores = rng.uniform(0, 1, n).astype(np.float32)
        if trial % 3 == 0:
            scores = np.round(scores, 1).astype(np.float32)
        limit = int(rng.choice([1, 7, 300]))
        assert nms(boxes, scores, 0.7, limit).tolist() == sequential_nms(boxes, scores, 0.7,
                                                                         limit)


def write_dataset(root: Path, sizes: list[tuple[int, int]]) -> Path:
    (root / "val2017_safe").mkdir(parents=True)
    images = []
    for i, (h, w) in enumerate(sizes):
        name = f"{i:012d}.jpg"
        cv2.imwrite(str(root / "val2017_safe" / name), np.full((h, w, 3), 40 * i, np.uint8))
        images.append({"id": 100 + i, "file_name": name, "height": h, "width": w, "license": 4})
    (root / "annotations").mkdir()
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps(
        {"images": images, "annotations": [], "categories": [{"id": 1, "name": "person"}]}))
    return root


def test_task_batches_by_shape(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "coco", [(480, 640), (640, 480), (480, 640), (427, 640)])
    task = create_task("yolo-99", TaskOptions(dataset=data, cache_dir=tmp_path / "cache"))
    assert task.loadgen_model == "yolo" and task.total_count() == 4
    assert task.performance_count() == 4  # 64, capped by the dataset
    assert task.model_inputs[0].shape == (None, 3, None, None)
    task.prepare()
    task.load_samples([0, 1, 2, 3])
    assert task.groups([3, 0, 1, 2]) == [[3], [0, 2], [1]]
    # Offline's length sort (descending) puts equal shapes side by side
    assert sorted(range(4), key=task.sample_length, reverse=True) == [1, 0, 2, 3]
    assert task.warmup_batches([0, 0]) == [[0, 0], [1, 1], [3, 3]]
    calls = []

    def predict(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = inputs["images"]
        calls.append(x.shape)
        assert x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1
        return {"output0": np.zeros((x.shape[0], 84, 10), np.float32)}

    assert task.infer(predict, [3, 0, 1, 2]) == [b""] * 4
    assert calls == [(1, 3, 448, 640), (2, 3, 480, 640), (1, 3, 640, 480)]
    with pytest.raises(ModelError, match="different letterboxed shapes"):
        task.batch_inputs([0, 1])
    with pytest.raises(ModelError, match="no output"):
        task.encode_responses([0], {"boxes": np.zeros(1)})
    square = create_task("yolo-95", TaskOptions(
        dataset=data, cache_dir=tmp_path / "cache",
        model_inputs=[TensorSpec("images", "float32", (None, 3, 640, 640))]))
    assert square.model_inputs[0].shape == (None, 3, 640, 640)
    with pytest.raises(DatasetError, match="needs --dataset"):
        create_task("yolo-99", TaskOptions())


def test_coco_safe_built_from_val2017(tmp_path: Path) -> None:
    """`get coco-safe --from` a COCO val2017 folder: the official filter, the filtered file
    written as json.dump writes it, links to the safe images, checked by count."""
    from mlharness.artefacts.adopt import _coco_safe_from_val2017
    from mlharness.artefacts.errors import ArtefactError
    from mlharness.artefacts.layouts import check_coco_safe

    source = write_dataset(tmp_path / "coco", [(32, 48)] * 4)
    (source / "val2017_safe").rename(source / "val2017")
    ann = source / "annotations" / "instances_val2017.json"
    coco = json.loads(ann.read_text())
    coco["licenses"] = [{"id": 4, "url": "http://creativecommons.org/licenses/by/2.0/"},
                        {"id": 2, "url": "http://creativecommons.org/licenses/by-nc/2.0/"}]
    coco["images"][1]["license"] = 2
    ann.write_text(json.dumps(coco))
    dest = tmp_path / "cache" / "coco-safe"
    dest.parent.mkdir()
    assert _coco_safe_from_val2017(source, dest, expected=3) == 3
    written = (dest / "annotations" / "instances_val2017.json").read_text()
    assert written == json.dumps(json.loads(written))  # json.dump's defaults
    assert sorted(p.name for p in (dest / "val2017_safe").iterdir()) == [
        "000000000000.jpg", "000000000002.jpg", "000000000003.jpg"]
    assert check_coco_safe(dest, expected=3) == 3
    with pytest.raises(ArtefactError, match="1,525"):
        check_coco_safe(dest, expected=1525)


def write_coco_zips(folder: Path, safe: int, unsafe: int) -> dict[str, str]:
    """``val2017.zip`` and ``annotations_trainval2017.zip`` laid out as cocodataset.org's (the
    same tiny JPEG under every name), ``safe`` images under CC BY and ``unsafe`` under CC BY-NC;
    returns their md5."""
    import hashlib
    import zipfile

    folder.mkdir(parents=True)
    jpeg = cv2.imencode(".jpg", np.full((8, 12, 3), 90, np.uint8))[1].tobytes()
    images = [{"id": i, "file_name": f"{i:012d}.jpg", "height": 8, "width": 12,
               "license": 4 if i % 3 or i >= 3 * unsafe else 2} for i in range(safe + unsafe)]
    coco = {"info": {"year": 2017}, "images": images, "categories": [{"id": 1}],
            "licenses": [{"id": 4, "url": "http://creativecommons.org/licenses/by/2.0/"},
                         {"id": 2, "url": "http://creativecommons.org/licenses/by-nc/2.0/"}],
            "annotations": [{"id": i, "image_id": i, "category_id": 1, "bbox": [1, 1, 4, 4]}
                            for i in range(safe + unsafe)]}
    with zipfile.ZipFile(folder / "annotations_trainval2017.zip", "w") as zf:
        zf.writestr("annotations/instances_val2017.json", json.dumps(coco))
        zf.writestr("annotations/captions_val2017.json", "{}")
    with zipfile.ZipFile(folder / "val2017.zip", "w") as zf:
        zf.writestr("val2017/", "")
        for image in images:
            zf.writestr("val2017/" + image["file_name"], jpeg)
    return {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in folder.glob("*.zip")}


def test_coco_safe_from_the_official_zips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`get coco-safe --from DIR` with COCO's two zips: md5 checked, the annotation file read
    from its zip and filtered, only the 1,525 safe images extracted; a copy whose md5 is not
    the published one, or half of the pair, is refused with a hint."""
    from mlharness.artefacts import coco_zips
    from mlharness.cli.main import main

    zips = tmp_path / "downloads"
    cache = tmp_path / "cache"
    md5 = write_coco_zips(zips, safe=1525, unsafe=40)
    assert main(["get", "coco-safe", "--from", str(zips), "--cache-dir", str(cache)]) == 2
    assert "is not COCO's annotations_trainval2017.zip" in capsys.readouterr().err
    monkeypatch.setattr(coco_zips, "PUBLISHED_MD5", md5)
    assert main(["get", "coco-safe", "--from", str(zips / "val2017.zip"),
                 "--cache-dir", str(cache)]) == 0
    dest = cache / "artefacts" / "datasets" / "coco-safe"
    subset = json.loads((dest / "annotations" / "instances_val2017.json").read_text())
    assert len(subset["images"]) == 1525 and {i["license"] for i in subset["images"]} == {4}
    assert len(subset["annotations"]) == 1525
    assert len(list((dest / "val2017_safe").iterdir())) == 1525
    assert not (dest / "val2017_safe").is_symlink()
    task = create_task("yolo-99", TaskOptions(dataset=dest, cache_dir=tmp_path / "pre"))
    assert task.total_count() == 1525
    (zips / "annotations_trainval2017.zip").unlink()
    capsys.readouterr()
    assert main(["get", "coco-safe", "--from", str(zips), "--cache-dir", str(cache)]) == 2
    assert "annotations_trainval2017.zip is not in" in capsys.readouterr().err


def test_int8_keeps_the_heads_box_decoding_in_fp32(tmp_path: Path) -> None:
    """What calibrate keeps in fp32 for YOLO (ultralytics' own int8 recipe): the head's own
    operations, its DFL and its class sigmoid; never the head's convolutions or the rest."""
    data = write_dataset(tmp_path / "coco", [(480, 640)])
    task = create_task("yolo-99", TaskOptions(dataset=data, cache_dir=tmp_path / "cache"))
    ops = [("/model.0/conv/Conv", "Conv"), ("/model.0/act/Sigmoid", "Sigmoid"),
           ("/model.23/cv2.0/cv2.0.0/conv/Conv", "Conv"), ("/model.23/Concat", "Concat"),
           ("/model.23/dfl/Softmax", "Softmax"), ("/model.23/dfl/conv/Conv", "Conv"),
           ("/model.23/Sub", "Sub"), ("/model.23/Mul_2", "Mul"), ("/model.23/Sigmoid", "Sigmoid"),
           ("/model.23/cv3.2/cv3.2.2/Conv", "Conv")]
    assert task.kept_fp32(ops) == ["/model.23/Concat", "/model.23/dfl/Softmax",
                                   "/model.23/dfl/conv/Conv", "/model.23/Sub", "/model.23/Mul_2",
                                   "/model.23/Sigmoid"]
    assert task.kept_fp32([("a", "Conv")]) == []
