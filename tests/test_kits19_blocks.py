"""3D-UNet building blocks and runs without the referee: the KiTS19 layout, the sliding window
against a plain window-by-window loop, DICE by hand, the checksum-keyed cache, and ``mlharness
run`` / ``get`` on synthetic cases (tests/synthetic_kits19.py)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import referee
from mlharness.cli.main import main
from mlharness.errors import DatasetError
from mlharness.tasks.kits19.cache import VolumeCache
from mlharness.tasks.kits19.cases import INFERENCE_CASES, case_files
from mlharness.tasks.kits19.dice import DiceSummary, case_dice
from mlharness.tasks.kits19.window import gaussian_patch, segment, window_count, window_origins
from synthetic_kits19 import make_case, make_kits19, unet3d_onnx


@pytest.fixture(scope="module")
def kits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kits19")
    return {"data": make_kits19(root / "data", duplicate=False),
            "model": unet3d_onnx(root / "unet3d.onnx"),
            "dynamic": unet3d_onnx(root / "unet3d_dynbatch.onnx", batch=None),
            "cache": root / "cache", "root": root}


@referee.official(f"{referee.KITS19_DIR}/meta/inference_cases.json")
def test_inference_cases_are_the_official_list() -> None:
    listed = json.loads((referee.INFERENCE / referee.KITS19_DIR / "meta" /
                         "inference_cases.json").read_text())
    assert tuple(listed) == INFERENCE_CASES and len(INFERENCE_CASES) == 43


def test_case_files_duplicate_and_missing(kits: dict[str, Path], tmp_path: Path) -> None:
    cases = case_files(kits["data"])
    assert [c.name for c in cases] == list(INFERENCE_CASES)
    # no case_00400 folder: the reference's copy of case_00185 is read from case_00185
    assert cases[-1].imaging == kits["data"] / "case_00185" / "imaging.nii.gz"
    assert case_files(kits["data"].parent)[0].imaging.parent.parent == kits["data"]  # data/
    broken = tmp_path / "broken"
    shutil.copytree(kits["data"], broken, symlinks=True)
    (broken / "case_00012" / "segmentation.nii.gz").unlink()
    with pytest.raises(DatasetError, match=r"1 KiTS19 case\(s\) missing or incomplete: case_00012"):
        case_files(broken)
    with pytest.raises(DatasetError, match="KiTS19 folder not found"):
        case_files(tmp_path / "nowhere")


def test_gaussian_patch_and_window_order() -> None:
    patch = gaussian_patch(8, 1.0)
    line = np.exp(-((np.arange(8) - 3.5) ** 2) / 2.0)
    expected = np.cbrt(line[:, None, None] * line[None, :, None] * line[None, None, :])
    np.testing.assert_allclose(patch, expected / expected.max(), rtol=1e-12)
    assert patch.max() == 1.0 and patch.shape == (8, 8, 8)
    origins = list(window_origins((128, 192, 256)))
    assert len(origins) == window_count((128, 192, 256)) == 6
    assert origins[:3] == [(0, 0, 0), (0, 0, 64), (0, 0, 128)] and origins[-1] == (0, 64, 128)


def _plain_segment(image: np.ndarray, predict) -> np.ndarray:
    """The sliding window as base_SUT.py's loop does it: one window per call, three-channel
    weights, the division, the argmax."""
    patch = gaussian_patch(128, 16.0).astype(np.float32)
    sums = np.zeros((1, 3, *image.shape[1:]), np.float32)
    weights = np.zeros_like(sums)
    for i, j, k in window_origins(image.shape[1:]):
        box = (..., slice(i, i + 128), slice(j, j + 128), slice(k, k + 128))
        sums[box] += predict(image[np.newaxis][box])[0] * patch
        weights[box] += patch
    sums /= weights
    return np.argmax(sums, axis=1).astype(np.uint8)[0]


def test_batched_windows_equal_one_window_per_call() -> None:
    rng = np.random.default_rng(5)
    image = rng.standard_normal((1, 128, 192, 192), dtype=np.float32)
    kernel = rng.standard_normal((3, 1), dtype=np.float32)

    def predict(windows: np.ndarray) -> np.ndarray:  # a per-voxel "model": 3 linear channels
        return (kernel[None, :, :, None, None] * windows[:, :, None]).reshape(
            windows.shape[0], 3, 128, 128, 128) + np.float32(0.1)

    expected = _plain_segment(image, predict).tobytes()
    for batch in (1, 3, 4, 8):
        for overlap in (False, True):
            assert segment(image, predict, batch, overlap).tobytes() == expected, (batch, overlap)


def test_dice_by_hand() -> None:
    target = np.array([[0, 1, 1, 2]], np.uint8)
    prediction = np.array([[0, 1, 2, 2]], np.uint8)
    score = case_dice("c", prediction, target)
    assert score.kidney == pytest.approx((2 * 1 + 1e-6) / (2 + 1 + 1e-6))
    assert score.tumour == pytest.approx((2 * 1 + 1e-6) / (1 + 2 + 1e-6))
    empty = case_dice("e", np.zeros((2, 2), np.uint8), np.zeros((2, 2), np.uint8))
    assert (empty.kidney, empty.tumour) == (1.0, 1.0)  # nothing to find, nothing found
    summary = DiceSummary((score, empty))
    assert summary.line() == (f"Accuracy: mean = {(score.composite + 1) / 2:.5f}, kidney = "
                              f"{(score.kidney + 1) / 2:.4f}, tumor = {(score.tumour + 1) / 2:.4f}")


def test_cache_follows_the_bytes(tmp_path: Path) -> None:
    data = tmp_path / "a"
    make_case(data / "case_00000", (20, 40, 40), (3.0, 2.0, 2.0), seed=1)
    cache = VolumeCache(tmp_path / "cache")
    [case] = case_files(data, ("case_00000",))
    assert cache.build([case]) == 1 and cache.build([case]) == 0
    moved = tmp_path / "b"
    data.rename(moved)
    [case] = case_files(moved, ("case_00000",))
    assert VolumeCache(tmp_path / "cache").build([case]) == 0  # same bytes elsewhere: reused
    make_case(moved / "case_00000", (20, 40, 40), (3.0, 2.0, 2.0), seed=2)
    fresh = VolumeCache(tmp_path / "cache")
    assert fresh.build([case]) == 1  # changed bytes: built again
    assert fresh.image(case).shape == (1, 128, 128, 128)


def run(kits: dict[str, Path], out: Path, *flags: str, model: str = "model") -> Path:
    code = main(["run", "-b", "3d-unet-99", "-m", str(kits[model]), "-d", str(kits["data"]),
                 "--cache-dir", str(kits["cache"]), "--output-dir", str(out), "--no-progress",
                 *flags])
    [run_dir] = [p for p in (out / "3d-unet-99").iterdir() if p.is_dir()]
    assert code in (0, 1), code
    return run_dir


def test_accuracy_run_scores_its_own_responses(kits: dict[str, Path], tmp_path: Path) -> None:
    import onnxruntime as ort

    run_dir = run(kits, tmp_path, "--mode", "accuracy", "--max-samples", "3")
    record = json.loads((run_dir / "run.json").read_text())
    assert record["task"]["window_batch"] == 1 and record["loadgen_model"] == "3d-unet"
    session = ort.InferenceSession(str(kits["model"]), providers=["CPUExecutionProvider"])
    cache = VolumeCache(kits["cache"])
    log = {e["qsl_idx"]: bytes.fromhex(e["data"])
           for e in json.loads((run_dir / "mlperf_log_accuracy.json").read_text())}
    scores = []
    for index, case in enumerate(case_files(kits["data"])[:3]):
        labels = segment(cache.image(case), lambda w: session.run(["output"], {"input": w})[0])
        assert log[index] == labels.tobytes()
        scores.append(case_dice(case.name, labels, cache.label(case)[0]))
    text = (run_dir / "accuracy.txt").read_text().strip()
    assert text == DiceSummary(tuple(scores)).line()
    assert record["accuracy"]["metric"] == "DICE" and record["accuracy"]["passed"] is False
    assert record["accuracy"]["target"] == pytest.approx(0.86170 * 0.99)


def test_performance_runs_use_equal_issue(kits: dict[str, Path], tmp_path: Path) -> None:
    # equal issue: the queries come in whole permutations of the 2 samples (3 asked: 4 issued)
    single = run(kits, tmp_path / "ss", "--scenario", "SingleStream", "--test",
                 "--target-latency", "2000", "--max-samples", "2", "--min-query-count", "3",
                 "--min-duration", "100")
    # a 100 ms minimum: VALID at any speed (at 1 s, a machine faster than the 1 QPS target
    # ended the query early: INVALID for the minimum duration, on an idle Xeon)
    offline = run(kits, tmp_path / "off", "--scenario", "Offline", "--test", "--target-qps", "1",
                  "--max-samples", "2", "--min-duration", "100", "--task-option",
                  "window_batch=3", model="dynamic")
    for run_dir in (single, offline):
        record = json.loads((run_dir / "run.json").read_text())
        # 4 SingleStream queries are too few for LoadGen's early-stopping estimate: INVALID
        assert record["status"] == "ok", record
        detail = (run_dir / "mlperf_log_detail.txt").read_text()
        assert '"key": "effective_sample_concatenate_permutation", "value": true' in detail
    assert '"key": "result_query_count", "value": 4' in (single / "mlperf_log_detail.txt").read_text()
    record = json.loads((offline / "run.json").read_text())
    assert record["task"]["window_batch"] == 3 and record["result"]["valid"]


def test_fixed_batch_model_refuses_a_window_batch(kits: dict[str, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "-b", "3d-unet-99", "-m", str(kits["model"]), "-d", str(kits["data"]),
                 "--cache-dir", str(kits["cache"]), "--output-dir", str(tmp_path), "--mode",
                 "accuracy", "--task-option", "window_batch=2", "--no-progress"])
    assert code == 2
    assert "window_batch 2 exceeds the model's fixed batch of 1" in capsys.readouterr().err


def test_get_adopts_kits19(kits: dict[str, Path], tmp_path: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
    full = tmp_path / "kits19" / "data"
    for n in range(210):  # the labelled cases of the official download, as links to one
        case = full / f"case_{n:05d}"
        case.mkdir(parents=True)
        for name in ("imaging.nii.gz", "segmentation.nii.gz"):
            os.symlink(kits["data"] / "case_00000" / name, case / name)
    common = ["--cache-dir", str(tmp_path / "cache")]
    assert main(["get", "kits19", "--from", str(full), *common]) == 0
    assert (tmp_path / "cache" / "artefacts" / "datasets" / "kits19").exists()
    (full / "case_00100" / "segmentation.nii.gz").unlink()
    capsys.readouterr()
    assert main(["get", "kits19", "--from", str(full), "--cache-dir", str(tmp_path / "c2")]) == 2
    assert "case_00100" in capsys.readouterr().err


def test_openvino_runs_the_windows(kits: dict[str, Path], tmp_path: Path) -> None:
    """The same run on OpenVINO (its own kernels: labels agree with onnxruntime's nearly
    everywhere), the dynamic-batch model in batches of 2 windows."""
    import onnxruntime as ort

    pytest.importorskip("openvino")
    run_dir = run(kits, tmp_path, "--mode", "accuracy", "--max-samples", "2", "--backend",
                  "openvino", "--task-option", "window_batch=2", model="dynamic")
    record = json.loads((run_dir / "run.json").read_text())
    assert record["backend"]["name"] == "openvino" and record["task"]["window_batch"] == 2
    session = ort.InferenceSession(str(kits["dynamic"]), providers=["CPUExecutionProvider"])
    cache = VolumeCache(kits["cache"])
    log = {e["qsl_idx"]: np.frombuffer(bytes.fromhex(e["data"]), np.uint8)
           for e in json.loads((run_dir / "mlperf_log_accuracy.json").read_text())}
    for index, case in enumerate(case_files(kits["data"])[:2]):
        labels = segment(cache.image(case), lambda w: session.run(["output"], {"input": w})[0])
        assert np.mean(log[index] == labels.reshape(-1)) > 0.999
