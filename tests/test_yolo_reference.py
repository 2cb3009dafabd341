"""YOLO's pre- and post-processing against the reference run unmodified: ``yolo_loadgen.py``
(ultralytics, in the YOLO referee's Python) on a random-weight YOLO11 and real photographs,
ultralytics' own NMS on raw outputs, and ``tools/accuracy-coco.py`` on the logs. The world (model
and photographs) is the session's (``conftest.yolo_world``), shared with
``test_yolo_submission.py``.

Tolerances, stated once: against the reference on the same ONNX file (ultralytics runs it on
onnxruntime) the rows are equal bit for bit; against the reference's PyTorch checkpoint run,
scores within 1e-4 and normalised box coordinates within 1e-4 (0.1 pixel of a 1000-pixel
image), the float32 difference of two runtimes; OpenVINO likewise. Near ties at the 300-box cut
may fall either side.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import referee
import yolo_support as ys
from mlharness.tasks.vision.coco_map import coco_map
from mlharness.tasks.vision.letterbox import LetterboxConfig, LetterboxPreprocessor, unpack
from mlharness.tasks.vision.openimages import read_images
from mlharness.tasks.vision.yolo_postprocess import CLASS_OFFSET, NmsSettings, select

pytestmark = pytest.mark.slow
SCORE_TOL = 1e-4
BOX_TOL = 1e-4


@pytest.fixture(scope="module")
def world(yolo_world: ys.YoloWorld) -> ys.YoloWorld:
    return yolo_world


@pytest.fixture(scope="module")
def referee_runs(world: ys.YoloWorld) -> dict[str, Path]:
    """The official and ultralytics code the module compares with, in one process of the YOLO
    referee's Python (each a script run unmodified, as on its own): ``yolo_loadgen.py`` on the
    .pt, on the dynamic ONNX export and on the fixed 640 one, and ultralytics' NMS
    (``yolo_referee_nms.py``) on :func:`raw_cases`. Their output folders by name."""
    folders = {name: world.root / f"ref-{name}" for name in ("pt", "onnx", "640", "nms")}
    folders["nms"].mkdir(parents=True, exist_ok=True)
    np.savez(folders["nms"] / "in.npz", **raw_cases(world))
    ys.run_scripts([ys.reference_job(world, world.pt, folders["pt"]),
                    ys.reference_job(world, world.onnx, folders["onnx"]),
                    ys.reference_job(world, world.onnx640, folders["640"]),
                    (folders["nms"], [str(ys.TESTS / "yolo_referee_nms.py"),
                                      str(folders["nms"] / "in.npz"),
                                      str(folders["nms"] / "out.npz")])], world.root)
    return folders


@pytest.fixture(scope="module")
def reference_pt(referee_runs: dict[str, Path]) -> dict[int, bytes]:
    return ys.reference_log(referee_runs["pt"])


@pytest.fixture(scope="module")
def reference_onnx(referee_runs: dict[str, Path]) -> dict[int, bytes]:
    """ultralytics on the dynamic ONNX export: it letterboxes to the stride, as on the .pt."""
    return ys.reference_log(referee_runs["onnx"])


def ours(world: ys.YoloWorld, model: Path, *, rect: bool = True, backend: str = "onnxruntime",
         batched: bool = True) -> dict[int, bytes]:
    names = [image["file_name"] for image in world.image_list()]
    return ys.ours(world.images, names, model, LetterboxConfig(rect=rect), backend, batched)


def assert_same(ref: dict[int, bytes], got: dict[int, bytes], score_tol: float,
                box_tol: float) -> None:
    assert sorted(ref) == sorted(got)
    problems = {i: ys.differences(ref[i], got[i], score_tol, box_tol) for i in ref}
    problems = {i: p for i, p in problems.items() if p}
    assert not problems, {i: p[:3] for i, p in problems.items()}


def test_the_world_is_worth_comparing(world: ys.YoloWorld, reference_pt) -> None:
    """The random model detects something different in every image, with spread scores."""
    assert len(reference_pt) == 5
    for payload in reference_pt.values():
        rows = np.frombuffer(payload, np.float32).reshape(-1, 7)
        assert 50 <= len(rows) <= 300
        assert rows[:, 5].max() > 0.01 and len(np.unique(rows[:, 6])) > 3
    shapes = {unpack(LetterboxPreprocessor(LetterboxConfig())(world.images / i["file_name"]))[1]
              .shape for i in world.image_list()}
    assert len(shapes) == 4  # the two zidane images share one: a real batch of two


@referee.official(ys.YOLO_DIR)
def test_equal_to_the_reference_on_the_same_onnx(world: ys.YoloWorld, reference_onnx) -> None:
    """Same runtime, same input: the same rows bit for bit, batched or not."""
    ref = reference_onnx
    assert ours(world, world.onnx) == ref
    assert ours(world, world.onnx, batched=False) == ref


@referee.official(ys.YOLO_DIR)
def test_square_letterbox_equals_the_reference_on_a_fixed_640_model(
        world: ys.YoloWorld, referee_runs: dict[str, Path]) -> None:
    ref = ys.reference_log(referee_runs["640"])
    assert ours(world, world.onnx640, rect=False, batched=False) == ref


@referee.official(ys.YOLO_DIR)
@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_within_tolerance_of_the_reference_checkpoint_run(world: ys.YoloWorld, reference_pt,
                                                          backend: str) -> None:
    """The reference as submitted runs the .pt on PyTorch; ours runs its ONNX export."""
    assert_same(reference_pt, ours(world, world.onnx, backend=backend), SCORE_TOL, BOX_TOL)


def raw_cases(world: ys.YoloWorld) -> dict[str, np.ndarray]:
    """Raw outputs ``[84, anchors]`` to run NMS on: the world's model on its photographs (every
    anchor a candidate, 300 kept), and made-up ones: boxes on a coarse grid (equal boxes, IoU
    exactly at thresholds), scores of two decimals (ties everywhere), few classes (long
    suppression chains), one class, nothing above 0.001, fewer than 300 survivors."""
    import onnxruntime as ort

    from mlharness.tasks.vision.letterbox import model_input

    session = ort.InferenceSession(str(world.onnx), providers=["CPUExecutionProvider"])
    prep = LetterboxPreprocessor(LetterboxConfig())
    cases = {}
    for k, image in enumerate(world.image_list()[:3]):
        boxed = unpack(prep(world.images / image["file_name"]))[1]
        cases[f"raw_photo{k}"] = session.run(None, {"images": model_input([boxed])})[0][0]
    rng = np.random.default_rng(7)
    for k in range(24):
        n = int(rng.choice([1, 40, 900, 4000]))
        xy = rng.uniform(0, 640, (2, n))
        wh = rng.uniform(4, 200, (2, n))
        if k % 2:
            xy, wh = np.round(xy / 16) * 16, np.round(wh / 16) * 16 + 16
        classes = int(rng.choice([1, 3, 80]))
        scores = np.full((80, n), 1e-4)
        best = rng.uniform(0, 1, n) ** 3 if k % 3 else np.round(rng.uniform(0, 1, n), 2)
        if k == 5:
            best[:] = 0.0005  # nothing above conf
        scores[rng.integers(0, classes, n), np.arange(n)] = best
        cases[f"raw_made{k}"] = np.concatenate([xy, wh, scores]).astype(np.float32)
    return cases


@referee.official(ys.YOLO_DIR)
def test_nms_equals_ultralytics(world: ys.YoloWorld, referee_runs: dict[str, Path]) -> None:
    """mlharness's vectorised candidate filter and class-aware NMS against ultralytics'
    ``non_max_suppression`` with torchvision's kernel (the reference's settings): the same boxes,
    scores and classes, bit for bit, in the same order."""
    cases = raw_cases(world)
    theirs = np.load(referee_runs["nms"] / "out.npz")
    sizes = []
    for name, raw in cases.items():
        boxes, scores, labels = select(raw, NmsSettings())
        mine = np.concatenate([boxes, scores[:, None], labels[:, None].astype(np.float32)], 1)
        ref = theirs["det_" + name.split("_", 1)[1]]
        assert mine.tobytes() == ref.tobytes(), (name, len(mine), len(ref))
        sizes.append(len(ref))
    assert 0 in sizes and 300 in sizes and any(0 < n < 300 for n in sizes)
    assert CLASS_OFFSET == 7680


@referee.official(ys.YOLO_DIR, ys.ACCURACY_COCO, python=True)
def test_map_equals_accuracy_coco(world: ys.YoloWorld, reference_pt, tmp_path: Path) -> None:
    """On annotations drawn from the detections (mAP neither 0 nor 100): our mAP of our log is
    the official script's on the same log, and equals the reference log's."""
    mine = ours(world, world.onnx)
    ys.ground_truth_from(world, reference_pt)
    try:
        images = read_images(world.annotations)
        result = coco_map(world.annotations, sorted(mine.items()), images)
        official_ours = ys.official_map(world, mine, tmp_path / "ours")
        official_ref = ys.official_map(world, reference_pt, tmp_path / "ref")
    finally:
        ys.write_annotations(world, world.image_list(), [])
    assert result.text.splitlines()[-1] == official_ours
    assert 5.0 < result.value < 95.0
    assert official_ours == official_ref


def run_cli(world: ys.YoloWorld, tmp_path: Path, *flags: str) -> tuple[int, Path]:
    from mlharness.cli.main import main

    runs = tmp_path / "runs"
    code = main(["run", "-b", "yolo-99", "--model", str(world.onnx), "--dataset",
                 str(world.coco), "--cache-dir", str(world.root / "cache"), "--no-progress",
                 "--output-dir", str(runs), "--test", "--threads", "1", *flags])
    [run_dir] = [p for p in (runs / "yolo-99").iterdir() if p.is_dir()]
    return code, run_dir


@referee.official(ys.YOLO_DIR, ys.ACCURACY_COCO, python=True)
def test_accuracy_run_gives_the_reference_detections_and_map(
        world: ys.YoloWorld, reference_onnx, tmp_path: Path) -> None:
    """``mlharness run --mode accuracy``: Offline's one query of all five samples sorted by
    shape and cut into batches of four, each split by shape; the log's rows those of the
    reference on the same ONNX, its accuracy.txt line the official script's on the reference's
    log. (The three scenarios' accuracy runs and performance runs: test_yolo_submission.py.)"""
    ref = reference_onnx
    ys.ground_truth_from(world, ref)
    try:
        code, run_dir = run_cli(world, tmp_path, "--scenario", "Offline", "--mode", "accuracy",
                                "--batch-size", "4")
        official_ref = ys.official_map(world, ref, tmp_path / "ref")
    finally:
        ys.write_annotations(world, world.image_list(), [])
    assert ys.read_log(run_dir / "mlperf_log_accuracy.json") == ref
    assert (run_dir / "accuracy.txt").read_text().strip().splitlines()[-1] == official_ref
    assert code in (0, 1)  # 1: a random model misses the 52.87 mAP target


def test_int8_calibration_keeps_the_head_and_runs(world: ys.YoloWorld, tmp_path: Path) -> None:
    """``mlharness calibrate -b yolo-99`` (QDQ for onnxruntime, on the photographs: no official
    YOLO list) quantises the convolutions but not the head's DFL and box decoding, and the int8
    model runs an accuracy pass (how close it stays to fp32 is no test on random weights: a
    random network amplifies any rounding, docs/yolo.md)."""
    import onnx

    from mlharness.cli.main import main

    names = tmp_path / "calibration.txt"
    names.write_text("".join(i["file_name"] + "\n" for i in world.image_list()))
    target = tmp_path / "yolo.int8.onnx"
    assert main(["calibrate", "-b", "yolo-99", "--model", str(world.onnx), "--dataset",
                 str(world.coco), "--calibration-list", str(names), "--output", str(target),
                 "--cache-dir", str(world.root / "cache"), "--no-progress"]) == 0
    record = json.loads(target.with_name(target.name + ".calibration.json").read_text())
    assert "/model.23/dfl/conv/Conv" in record["kept_fp32"]
    graph = onnx.load(str(target)).graph
    dequantised = {o for n in graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    convs = {n.name: n for n in graph.node if n.op_type == "Conv"}
    assert not set(convs["/model.23/dfl/conv/Conv"].input) & dequantised
    assert set(convs["/model.0/conv/Conv"].input) & dequantised
    code, run_dir = run_cli(world, tmp_path, "--model", str(target), "--precision", "int8",
                            "--mode", "accuracy", "--scenario", "Offline")
    assert json.loads((run_dir / "run.json").read_text())["status"] == "ok"
