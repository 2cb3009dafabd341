"""Calibrated (static) int8 Whisper: ``mlharness calibrate -b whisper --backend hf`` writes the
int8 folder and its record from an own list of clips (MLCommons publishes no whisper list), a
``--precision int8`` run of it records the calibration and scores as ``accuracy_eval.py`` run
unmodified on its log, and the refusals are one line each. The tiny random-weight Whisper and
the espeak-ng clips are the session's (``whisper_fixtures``)."""

from __future__ import annotations

import json
import shutil
import threading

import pytest
import referee
import whisper_fixtures as wf
from catalogue_support import assert_clean_error, run_cli
from extras import has_extra

from mlharness.speech.manifest import read_manifest

pytestmark = [pytest.mark.slow,  # ~50 s on 2 shared cores beside the session's clips and model
              pytest.mark.skipif(not (has_extra("torch") and has_extra("soundfile")
                                      and has_extra("whisper")),
                                 reason="the whisper extra is missing")]
PROMPT = [50258, 50259, 50360, 50364]


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory, capsys_module):
    """The session's model copied, then calibrated on two clips named by file (one by its
    QSL index would do as well)."""
    case = wf.session_data(tmp_path_factory)
    work = tmp_path_factory.mktemp("whisper_int8")
    model = shutil.copytree(wf.session_model(tmp_path_factory), work / "whisper-tiny")
    clips = read_manifest(case["manifest"]).clips
    listed = work / "clips.txt"
    listed.write_text(f"{clips[0].audio.name}\n{clips[2].audio.name}\n")
    result = run_cli(["calibrate", "-b", "whisper", "--backend", "hf", "--model", model,
                      "--dataset", case["data"], "--calibration-list", listed,
                      "--task-option", "max_new_tokens=8", "--no-progress"], capsys_module)
    assert result.code == 0, (result.out[-2000:], result.err[-2000:])
    return {**case, "work": work, "source": model, "model": work / "whisper-tiny.int8",
            "list": listed, "out": result.out}


@pytest.fixture(scope="module")
def capsys_module():
    """run_cli reads its output from a capsys; module fixtures get a stand-in that keeps
    none (the outcome's code and the files are what they check)."""
    class _Quiet:
        def readouterr(self):
            return type("Captured", (), {"out": "", "err": ""})()
    return _Quiet()


def test_calibrate_writes_the_int8_folder_and_its_record(calibrated):
    import torch

    from mlharness.backends.hf_whisper import WhisperModel
    from mlharness.backends.hf_whisper_int8 import StaticInt8Linear

    folder = calibrated["model"]
    assert {"config.json", "preprocessor_config.json", "tokenizer.json",
            "int8_linears.safetensors", "model.safetensors",
            "mlharness_int8.json"} <= {p.name for p in folder.iterdir()}
    record = json.loads((folder.parent / "whisper-tiny.int8.calibration.json").read_text())
    assert record["benchmark"] == "whisper" and record["backend"] == "hf"
    assert record["samples"]["official"] is False and record["samples"]["used"] == 2
    assert record["samples"]["list"] == str(calibrated["list"].resolve())
    assert record["qsl_indices"] == [0, 2] and record["clips"] == 2
    assert record["activations"].startswith("uint8 per tensor, affine, static")
    assert len(record["source_sha256"]) == 64
    scales = json.loads((folder / "mlharness_int8.json").read_text())["layers"]
    runner = WhisperModel(folder, "int8", None)
    linears = [m for m in runner.net.modules() if isinstance(m, torch.nn.Linear)]
    static = [m for m in runner.net.modules() if isinstance(m, StaticInt8Linear)]
    assert not linears and len(static) == len(scales) and "proj_out" in scales
    # each layer's fixed input scale is its calibrated range over 255 levels (uint8, VNNI) or
    # 127 (reduce_range)
    layer = scales["model.decoder.layers.0.fc1"]
    levels = 127 if record["reduce_range"] else 255
    assert layer["input_scale"] == pytest.approx((layer["input_max"] - layer["input_min"])
                                                 / levels)
    # the int8 pass transcribes as the batched greedy pass does: ids end at EOS or the limit
    clips = [c.audio.read_bytes() for c in read_manifest(calibrated["manifest"]).clips]
    firsts: dict[int, list[int]] = {}
    out = runner.transcribe(clips, PROMPT, [6, 3, 6, 6], lambda k, ids: firsts.setdefault(k, ids),
                            threading.Event())
    for k, ids in enumerate(out):
        assert 1 <= len(ids) <= [6, 3, 6, 6][k] and firsts[k] == ids[:1]


def test_calibrated_run_records_it_and_scores_as_accuracy_eval(calibrated, tmp_path, capsys):
    result = run_cli(["run", "-b", "whisper", "--backend", "hf", "--model", calibrated["model"],
                      "--dataset", calibrated["data"], "--mode", "accuracy", "--precision",
                      "int8", "--output-dir", tmp_path, "--task-option", "max_new_tokens=12",
                      "--batch-size", "4", "--no-progress"], capsys)
    assert result.code == 1, (result.out[-2000:], result.err[-2000:])  # below the target
    run_dir = next((tmp_path / "whisper").glob("Offline-accuracy-*"))
    backend = json.loads((run_dir / "run.json").read_text())["backend"]
    assert backend["precision"] == "int8" and backend["int8"] == "static (calibrated)"
    assert backend["calibration"]["recipe"].startswith("whisper-static-int8")
    from mlharness.submission.documents import weight_transformations

    said = weight_transformations("int8", backend)  # the submission's measurements.json
    assert "whisper-static-int8" in said and "over 2 samples" in said
    line = referee.whisper("speech2text/accuracy_eval.py", "--log_dir", str(run_dir),
                           "--dataset_dir", str(calibrated["data"]), "--manifest",
                           str(calibrated["manifest"])).stdout.strip().splitlines()[-1]
    assert (run_dir / "accuracy.txt").read_text().strip() == line


def test_refusals_are_one_line(calibrated, tmp_path, capsys):
    base = ["calibrate", "-b", "whisper", "--backend", "hf", "--dataset", calibrated["data"],
            "--no-progress"]
    listed = ["--calibration-list", calibrated["list"]]
    assert_clean_error(run_cli([*base, "--model", calibrated["model"], *listed], capsys), 2,
                       "already a calibrated int8 model")
    assert_clean_error(run_cli([*base, "--model", calibrated["source"], "--output",
                                tmp_path / "y.int8"], capsys), 2, "no official calibration list")
    missing = tmp_path / "missing.txt"
    missing.write_text(f"{calibrated['list'].read_text()}no-such-clip.wav\n")
    assert_clean_error(run_cli([*base, "--model", calibrated["source"], "--output",
                                tmp_path / "x.int8", "--calibration-list", missing], capsys),
                       2, "names are not in this dataset: no-such-clip.wav")
    assert_clean_error(run_cli([*base, "--model", calibrated["source"], *listed], capsys), 2,
                       "exists: calibrate does not overwrite it")
    assert_clean_error(run_cli(["run", "-b", "whisper", "--backend", "hf", "--model",
                                calibrated["model"], "--dataset", calibrated["data"],
                                "--output-dir", tmp_path, "--no-progress"], capsys),
                       2, "is a calibrated int8 model, but --precision is fp32")
