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
def test_equal_to_the_reference_on_the_same_onnx(world: ys.YoloWorld) -> None:
    """ultralytics on the dynamic ONNX export letterboxes to the stride (as on the .pt): same
    runtime, same input, the same rows bit for bit, batched or not."""
    ref = ys.run_reference(world, world.onnx, world.root / "ref-onnx")
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
