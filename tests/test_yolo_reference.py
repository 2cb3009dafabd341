"""YOLO's pre- and post-processing against the reference run unmodified: ``yolo_loadgen.py``
(ultralytics, in the YOLO referee's Python) on a random-weight YOLO11 and real photographs, and
``tools/accuracy-coco.py`` on the logs.

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
from mlharness.tasks.vision.letterbox import (LetterboxConfig, LetterboxPreprocessor,
                                              model_input, unpack)
from mlharness.tasks.vision.openimages import read_images
from mlharness.tasks.vision.yolo_postprocess import NmsSettings, detect, response_rows

pytestmark = pytest.mark.slow
SCORE_TOL = 1e-4
BOX_TOL = 1e-4


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> ys.YoloWorld:
    return ys.build_world(tmp_path_factory.mktemp("yolo"))


@pytest.fixture(scope="module")
def reference_pt(world: ys.YoloWorld) -> dict[int, bytes]:
    return ys.run_reference(world, world.pt, world.root / "ref-pt")


@pytest.fixture(scope="module")
def reference_onnx(world: ys.YoloWorld) -> dict[int, bytes]:
    """ultralytics on the dynamic ONNX export: it letterboxes to the stride, as on the .pt."""
    return ys.run_reference(world, world.onnx, world.root / "ref-onnx")


def predictor(model: Path, backend: str):
    """``inputs -> output0`` on onnxruntime or OpenVINO (one thread: a shared machine)."""
    if backend == "onnxruntime":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        session = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
        return lambda x: session.run(["output0"], {"images": x})[0]
    import openvino as ov

    compiled = ov.Core().compile_model(str(model), "CPU", {"INFERENCE_NUM_THREADS": 1,
                                                          "INFERENCE_PRECISION_HINT": "f32"})
    return lambda x: compiled(x)[compiled.output(0)]


def ours(world: ys.YoloWorld, model: Path, *, rect: bool = True, backend: str = "onnxruntime",
         batched: bool = True) -> dict[int, bytes]:
    """Every image through mlharness's letterbox, the runtime and the NMS; images of one
    letterboxed shape in one batch (``batched``)."""
    prep = LetterboxPreprocessor(LetterboxConfig(rect=rect))
    run = predictor(model, backend)
    samples = [unpack(prep(world.images / img["file_name"])) for img in world.image_list()]
    groups: dict[tuple[int, ...], list[int]] = {}
    for idx, (_, boxed) in enumerate(samples):
        groups.setdefault(boxed.shape if batched else (idx,), []).append(idx)
    out: dict[int, bytes] = {}
    for members in groups.values():
        raw = run(model_input([samples[i][1] for i in members]))
        assert raw.shape[0] == len(members)
        for row, idx in zip(raw, members):
            original, boxed = samples[idx]
            found = detect(row, boxed.shape[:2], original, NmsSettings())
            out[idx] = response_rows(idx, found, original).tobytes()
    return out


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
def test_square_letterbox_equals_the_reference_on_a_fixed_640_model(world: ys.YoloWorld) -> None:
    ref = ys.run_reference(world, world.onnx640, world.root / "ref-640")
    assert ours(world, world.onnx640, rect=False, batched=False) == ref


@referee.official(ys.YOLO_DIR)
@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_within_tolerance_of_the_reference_checkpoint_run(world: ys.YoloWorld, reference_pt,
                                                          backend: str) -> None:
    """The reference as submitted runs the .pt on PyTorch; ours runs its ONNX export."""
    assert_same(reference_pt, ours(world, world.onnx, backend=backend), SCORE_TOL, BOX_TOL)


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
@pytest.mark.parametrize("scenario", ["Offline", "MultiStream"])
def test_accuracy_run_gives_the_reference_detections_and_map(
        world: ys.YoloWorld, reference_onnx, tmp_path: Path, scenario: str) -> None:
    """``mlharness run --mode accuracy``: batches split by shape (Offline: all five samples in
    one query; MultiStream: queries of eight), the log's rows those of the reference on the
    same ONNX, its accuracy.txt line the official script's on the reference's log."""
    ref = reference_onnx
    ys.ground_truth_from(world, ref)
    try:
        code, run_dir = run_cli(world, tmp_path, "--scenario", scenario, "--mode", "accuracy",
                                "--batch-size", "4")
        official_ref = ys.official_map(world, ref, tmp_path / "ref")
    finally:
        ys.write_annotations(world, world.image_list(), [])
    assert ys.read_log(run_dir / "mlperf_log_accuracy.json") == ref
    assert (run_dir / "accuracy.txt").read_text().strip().splitlines()[-1] == official_ref
    assert code in (0, 1)  # 1: a random model misses the 52.87 mAP target


@pytest.mark.parametrize("scenario", ["SingleStream", "MultiStream", "Offline"])
def test_performance_runs(world: ys.YoloWorld, tmp_path: Path, scenario: str) -> None:
    """Each edge scenario runs under mlperf.conf's yolo key; 4 queries are too few for early
    stopping's latency estimate (SingleStream, MultiStream), the only reason LoadGen may give."""
    batch = [] if scenario == "SingleStream" else ["--batch-size", "4"]
    code, run_dir = run_cli(world, tmp_path, "--scenario", scenario, "--min-query-count", "4",
                            "--min-duration", "0", *batch)
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "ok" and record["task"]["loadgen_model"] == "yolo"
    result = record["result"]
    assert result["valid"] or result["reasons"] == [
        "early stopping not met (too few queries for the latency estimate)"], result
    assert code == (0 if result["valid"] else 1)
    assert result["effective"]["effective_performance_sample_count"] == 64
    assert f"yolo.{scenario}." in (run_dir / "user.conf").read_text()
