"""Reduced precision judged on a small TRAINED model with decisive outputs
(``trained_fixtures.make_trained_cnn``): calibrated int8 (onnxruntime and OpenVINO) and bf16
(OpenVINO, where the CPU has it) keep top-1 within a point or two of fp32, through
``mlharness calibrate`` and accuracy-mode runs. No timing is asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlharness.cli.main import main

pytest.importorskip("torch", reason="training the fixture needs the torch extra")
from trained_fixtures import make_trained_cnn  # noqa: E402


def top1(tmp_path: Path, model: Path, data: Path, *flags: str) -> float:
    runs = tmp_path / "runs" / "-".join(flags).replace("-", "") or "fp32"
    code = main(["run", "-b", "resnet50", "--model", str(model), "--dataset", str(data),
                 "--cache-dir", str(tmp_path / "cache"), "--mode", "accuracy", "--no-progress",
                 "--output-dir", str(runs), *flags])
    [run_dir] = list((runs / "resnet50").iterdir())
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "ok" and code in (0, 1), record.get("error")
    return record["accuracy"]["value"]


@pytest.mark.slow
def test_int8_and_bf16_keep_top1_of_a_trained_cnn(tmp_path: Path) -> None:
    model, data = make_trained_cnn(tmp_path, train_count=80, eval_count=30)
    fp32 = top1(tmp_path, model, data)
    assert fp32 >= 80.0  # the fixture is trained: decisive, mostly right
    assert main(["calibrate", "-b", "resnet50", "--model", str(model), "--dataset", str(data),
                 "--cache-dir", str(tmp_path / "cache")]) == 0
    q = model.with_name(model.stem + ".int8.onnx")
    assert top1(tmp_path, q, data, "--precision", "int8") >= fp32 - 5.0
    try:
        import openvino  # noqa: F401
    except ImportError:
        return
    assert top1(tmp_path, q, data, "--precision", "int8", "--backend", "openvino") >= fp32 - 5.0
    from mlharness.hostinfo import matrix_isa

    if matrix_isa()["bf16"]:
        assert top1(tmp_path, model, data, "--precision", "bf16",
                    "--backend", "openvino") >= fp32 - 5.0
