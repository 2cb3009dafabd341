"""Catalogue: `mlharness calibrate` given an int8 model, an output it would overwrite, a list
naming samples the dataset lacks, and two runtimes calibrating one model (issue 36 item 4).

Real calibrations of the demo model on the demo digits (onnxruntime's quantiser, and NNCF's for
the OpenVINO case); each refusal asserts exit 2, one line naming the problem, and that no file
changed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from catalogue_support import DEMO_DATA, assert_clean_error, run_cli, snapshot


@pytest.fixture
def ws(tmp_path: Path, monkeypatch) -> Path:
    shutil.copyfile(DEMO_DATA / "digits_mlp.onnx", tmp_path / "m.onnx")
    (tmp_path / "two.txt").write_text("digit_00000.png\ndigit_00001.png\n")
    (tmp_path / "gaps.txt").write_text("digit_00000.png\nnope_1.png\ndigit_00001.png\nnope_2.png\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    return tmp_path


def calibrate(*extra: str, model: str = "m.onnx", cal: str = "two.txt") -> list[str]:
    return ["calibrate", "-b", "demo", "--model", model, "--dataset", str(DEMO_DATA / "dataset"),
            "--calibration-list", cal, "--cache-dir", "cache", "--no-progress", *extra]


def _made(ws: Path, capsys) -> None:
    result = run_cli(calibrate(), capsys)
    assert result.code == 0, result.err
    assert (ws / "m.int8.onnx").is_file() and (ws / "m.int8.onnx.calibration.json").is_file()


REFUSED = [
    # (id, setup after a first calibration, argv, fragment)
    ("already-int8", None, calibrate(model="m.int8.onnx"), "already int8"),
    ("output-exists", None, calibrate(), "exists: calibrate does not overwrite"),
    ("force-foreign-file", lambda ws: (ws / "mine.onnx").write_text("my file"),
     calibrate("--force", "--output", "mine.onnx"), "--force replaces only a model calibrate"),
    ("force-onto-the-model", None, calibrate("--force", "--output", "m.onnx"),
     "is the model being calibrated"),
    ("list-names-missing-samples", None, calibrate("--output", "new.onnx", cal="gaps.txt"),
     "2 of the 4 samples gaps.txt names are not in this dataset: nope_1.png, nope_2.png"),
]


REFUSED.append(("int8-graph-without-record",
                lambda ws: shutil.copyfile(ws / "m.int8.onnx", ws / "q.onnx"),
                calibrate("--output", "q2.onnx", model="q.onnx"), "already int8"))


@pytest.mark.parametrize("case", REFUSED, ids=[c[0] for c in REFUSED])
def test_calibrate_refuses_and_changes_nothing(case, ws: Path, capsys):
    _, setup, argv, fragment = case
    _made(ws, capsys)
    if setup:
        setup(ws)
    before = snapshot(ws, skip=("cache",))
    result = run_cli(argv, capsys)
    assert_clean_error(result, 2, fragment)
    if "missing-samples" not in case[0]:  # refused before it says it starts
        assert "calibrating" not in result.out
    assert snapshot(ws, skip=("cache",)) == before
    assert not list(ws.glob("*.int8.int8.*"))


def test_force_replaces_a_model_calibrate_wrote(ws: Path, capsys):
    _made(ws, capsys)
    first = json.loads((ws / "m.int8.onnx.calibration.json").read_text())["created"]
    result = run_cli(calibrate("--force", "--calibration-list", "two.txt"), capsys)
    assert result.code == 0, result.err
    record = json.loads((ws / "m.int8.onnx.calibration.json").read_text())
    assert record["model"] == str((ws / "m.int8.onnx").resolve()) and record["created"] >= first


def test_allow_missing_calibrates_on_what_is_there_and_says_so(ws: Path, capsys):
    result = run_cli(calibrate("--allow-missing", cal="gaps.txt"), capsys)
    assert result.code == 0, result.err
    said = " ".join(result.out.split())
    assert "2 of 4 samples" in said and "2 of the 4 listed samples are not in this dataset" in said
    samples = json.loads((ws / "m.int8.onnx.calibration.json").read_text())["samples"]
    assert samples["used"] == 2 and samples["missing"] == ["nope_1.png", "nope_2.png"]


def test_each_runtime_keeps_its_own_calibration_record(ws: Path, capsys):
    pytest.importorskip("nncf")
    _made(ws, capsys)
    assert run_cli(calibrate("--backend", "openvino"), capsys).code == 0
    ort = json.loads((ws / "m.int8.onnx.calibration.json").read_text())
    ov = json.loads((ws / "m.int8.xml.calibration.json").read_text())
    assert ort["backend"] == "onnxruntime" and ov["backend"] == "openvino"
    # the onnxruntime int8 run records the onnxruntime calibration, not OpenVINO's
    code = run_cli(["run", "-b", "demo", "--model", "m.int8.onnx", "--precision", "int8",
                    "-s", "Offline", "--min-duration", "0", "--min-query-count", "100",
                    "--target-qps", "100", "--output-dir", "runs", "--no-progress"], capsys).code
    assert code == 0
    run_json = next((ws / "runs" / "demo").glob("*/run.json"))
    recorded = json.loads(run_json.read_text())["backend"]["calibration"]
    assert recorded["backend"] == "onnxruntime" and recorded["model"] == ort["model"]


def test_an_older_shared_record_describes_only_the_model_it_names(ws: Path, capsys):
    from mlharness.backends.quantised import calibration_record

    _made(ws, capsys)
    own = ws / "m.int8.onnx.calibration.json"
    record = json.loads(own.read_text())
    own.unlink()  # as an older calibrate left it: one m.int8.calibration.json, last writer wins
    legacy = ws / "m.int8.calibration.json"
    legacy.write_text(json.dumps({**record, "backend": "openvino",
                                  "model": str(ws / "m.int8.xml")}))
    assert calibration_record(ws / "m.int8.onnx") is None  # OpenVINO's, not this model's
    assert calibration_record(ws / "m.int8.xml")["backend"] == "openvino"
    legacy.write_text(json.dumps(record))
    assert calibration_record(ws / "m.int8.onnx")["backend"] == "onnxruntime"
