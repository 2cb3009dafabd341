"""3D-UNet into a submission: an accuracy run of all 43 cases that meets the DICE target and a
test-length Offline run, laid out by ``submit``; our check and the official v6.1 checker report
exactly what a test-length run cannot meet (its duration).

The cases make the target reachable with a random model: one case at the target spacing whose
128^3 volume pre-processing leaves as it is, labelled with the model's own answer (every case
folder links to it), so DICE is 1.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import referee
from kits19_support import ort_predict
from mlharness.runner import execute
from mlharness.spec import RunSpec
from mlharness.submission import submit
from mlharness.submission.official import run_official
from mlharness.tasks.kits19.cache import VolumeCache
from mlharness.tasks.kits19.cases import INFERENCE_CASES, case_files
from mlharness.tasks.kits19.window import segment
from synthetic_kits19 import kits_affine, make_case, unet3d_onnx

pytestmark = pytest.mark.slow


def self_labelled(root: Path, model: Path) -> Path:
    """43 case folders linking to one case labelled with ``model``'s answer."""
    import nibabel

    data = root / "data"
    first = data / INFERENCE_CASES[0]
    make_case(first, (128, 128, 128), (1.6, 1.2, 1.2), seed=3)
    [case] = case_files(data, INFERENCE_CASES[:1])
    image = VolumeCache(root / "probe-cache").image(case)
    assert image.shape == (1, 128, 128, 128)  # pre-processing kept the volume as it was
    labels = segment(image, ort_predict(model))
    nibabel.save(nibabel.Nifti1Image(labels, kits_affine((1.6, 1.2, 1.2))),
                 first / "segmentation.nii.gz")
    for name in INFERENCE_CASES[1:]:
        (data / name).mkdir()
        for f in ("imaging.nii.gz", "segmentation.nii.gz"):
            os.symlink(first / f, data / name / f)
    return data


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("kits19submit")
    model = unet3d_onnx(root / "unet3d.onnx")
    data = self_labelled(root, model)
    runs = root / "runs"
    base = {"benchmark": "3d-unet-99", "scenario": "Offline", "model": model, "dataset": data,
            "cache_dir": root / "cache", "output_dir": runs, "stall_timeout": 600.0}
    acc = execute(RunSpec(mode="accuracy", **base))
    perf = execute(RunSpec(mode="performance", target_qps=0.5, min_query_count=43, **base))
    assert acc.status == "ok" and perf.status == "ok"
    assert acc.accuracy is not None and acc.accuracy.value == pytest.approx(1.0)
    assert acc.accuracy.passed and perf.result is not None and perf.result.valid
    return runs


def test_submit_lays_out_3d_unet_and_the_checker_agrees(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "submission"
    result = submit(runs, out, "MyOrg", "open", "tiny-cpu")
    scen = out / "open" / "MyOrg" / "results" / "tiny-cpu" / "3d-unet-99" / "Offline"
    text = (scen / "accuracy" / "accuracy.txt").read_text()
    assert text.startswith("Accuracy: mean = 1.00000, kidney = 1.0000, tumor = 1.0000")
    assert "hash=" in text
    assert (scen / "accuracy" / "mlperf_log_accuracy.json").stat().st_size <= 10 * 1024
    assert json.loads((scen / "measurements.json").read_text())["input_data_types"]
    assert [p.code for p in result.problems] == ["test-duration"]
    referee.require("tools/submission/submission_checker/main.py", python=True)
    official = run_official(out, referee.INFERENCE, "v6.1", python=referee.REFEREE_PYTHON)
    assert [p.code for p in official.problems] == ["test-duration"], official.text[-3000:]
    assert np.isclose(float(text.split("mean = ")[1].split(",")[0]), 1.0)
