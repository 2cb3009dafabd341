"""``mlharness calibrate``: official calibration lists, the int8 model and its record, and runs
that record precision and calibration in run.json (onnxruntime, and OpenVINO when installed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from extras import has_extra
from mlharness.cli.main import main
from mlharness.rules.calibration_lists import DATA, official_list
from mlharness.submission.documents import weight_transformations
from synthetic_squad import make_bert_onnx, make_squad, make_vocab, vocab_size
from synthetic_vision import make_imagenet, resnet50_onnx


def test_official_lists_are_shipped_whole() -> None:
    assert len(official_list("resnet50").entries()) == 500
    assert official_list("resnet50", "option_2").entries() != official_list("resnet50").entries()
    features = official_list("bert-99.9").entries()
    assert len(features) == 100 and all(f.isdigit() for f in features)
    assert len(official_list("retinanet").entries()) == 500  # no final newline: wc -l says 499
    assert "mlcommons/inference" in (DATA / "SOURCE.md").read_text()


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic set in which 5 of 9 images carry names from the official list option 1."""
    root = tmp_path_factory.mktemp("cal_vision")
    names = official_list("resnet50").entries()[:5]
    lines = []
    for i, (name, label) in enumerate(make_imagenet(root / "imagenet", count=9)):
        if i < len(names):
            (root / "imagenet" / name).rename(root / "imagenet" / names[i])
            name = names[i]
        lines.append(f"{name} {label}\n")
    (root / "imagenet" / "val_map.txt").write_text("".join(lines))
    resnet50_onnx(root / "resnet50_v1.onnx")
    return root


def run(tmp_path: Path, *flags: str) -> tuple[int, dict]:
    runs = tmp_path / "runs"
    code = main(["run", "--no-progress", "--output-dir", str(runs), "--test", *flags])
    dirs = sorted(p for p in runs.glob("[!_]*/*") if p.is_dir())  # not the _tune/ probes
    return code, json.loads((dirs[-1] / "run.json").read_text()) if dirs else {}


def test_resnet50_calibrated_int8_runs_and_is_recorded(imagenet: Path, tmp_path: Path) -> None:
    model = imagenet / "resnet50_v1.onnx"
    data = ["--dataset", str(imagenet / "imagenet"), "--cache-dir", str(imagenet / "cache")]
    assert main(["calibrate", "-b", "resnet50", "--model", str(model), *data]) == 0
    q = imagenet / "resnet50_v1.int8.onnx"
    record = json.loads((imagenet / "resnet50_v1.int8.onnx.calibration.json").read_text())
    assert record["samples"]["official"] is True and record["samples"]["used"] == 5
    assert record["samples"]["list"].endswith("ImageNet/cal_image_list_option_1.txt")
    assert record["qsl_indices"] == [0, 1, 2, 3, 4] and "not the official" in record["samples"]["note"]
    import onnx

    ops = {n.op_type for n in onnx.load(str(q)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops

    common = ["-b", "resnet50", "--model", str(q), *data, "--mode", "accuracy"]
    code, rec = run(tmp_path / "fp32", *common)
    assert code == 2  # a calibrated int8 model is never run as "fp32"
    _, ref = run(tmp_path / "ref", "-b", "resnet50", "--model", str(model), *data,
                 "--mode", "accuracy")
    for backend in ["onnxruntime", *(["openvino"] if has_extra("openvino") else [])]:
        _, rec = run(tmp_path / backend, *common, "--precision", "int8", "--backend", backend)
        assert rec["status"] == "ok", rec.get("error")
        assert rec["backend"]["precision"] == "int8"
        assert rec["backend"]["calibration"]["source_sha256"] == record["source_sha256"]
        assert rec["accuracy"]["value"] == pytest.approx(ref["accuracy"]["value"], abs=25)
        # the submission's measurements.json names the calibration the run found
        said = weight_transformations("int8", rec["backend"])
        assert said.startswith("post-training int8 quantisation") and "official" in said
        assert f"over {len(record['qsl_indices'])} samples" in said


def test_bert_calibration_with_own_list(tmp_path: Path) -> None:
    squad = make_squad(tmp_path / "dev-v1.1.json", articles=2, seed=3)
    vocab = make_vocab(tmp_path / "vocab.txt", squad)
    model = make_bert_onnx(tmp_path / "bert.onnx", vocab_size(vocab))
    own = tmp_path / "mine.txt"
    own.write_text("0\n2\n4\n")
    data = ["--dataset", str(squad), "--vocab", str(vocab), "--cache-dir", str(tmp_path / "c")]
    assert main(["calibrate", "-b", "bert-99", "--model", str(model), *data,
                 "--calibration-list", str(own), "--output", str(tmp_path / "q.onnx")]) == 0
    record = json.loads((tmp_path / "q.onnx.calibration.json").read_text())
    assert record["samples"]["official"] is False and record["qsl_indices"] == [0, 2, 4]
    assert record["kept_fp32"] == ["qa.mm"]  # the QA head stays fp32
    code, rec = run(tmp_path, "-b", "bert-99", "--model", str(tmp_path / "q.onnx"), *data,
                    "--precision", "int8", "--mode", "accuracy", "--max-samples", "4")
    assert rec["status"] == "ok" and rec["backend"]["calibration"]["qsl_indices"] == [0, 2, 4]
    said = weight_transformations("int8", rec["backend"])
    assert "over 3 samples" in said and str(own.resolve()) in said and "official" not in said


def test_no_list_no_samples_refused(imagenet: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture) -> None:
    out = ["--output", str(tmp_path / "new.int8.onnx")]  # the module's int8 model exists
    demo = ["calibrate", "-b", "demo", "--model", str(imagenet / "resnet50_v1.onnx"),
            "--dataset", str(imagenet / "imagenet"), *out]
    assert main(demo) == 2 and "no official calibration list" in capsys.readouterr().err
    other = tmp_path / "imagenet"
    make_imagenet(other, count=3)  # none of its names is on the official list
    assert main(["calibrate", "-b", "resnet50", "--model", str(imagenet / "resnet50_v1.onnx"),
                 "--dataset", str(other), "--cache-dir", str(tmp_path / "c"), *out]) == 2
    assert "none of the 500 calibration samples" in capsys.readouterr().err


def test_openvino_calibration_is_an_nncf_ir(imagenet: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("nncf")
    model = imagenet / "resnet50_v1.onnx"
    data = ["--dataset", str(imagenet / "imagenet"), "--cache-dir", str(imagenet / "cache")]
    cal = ["calibrate", "-b", "resnet50", "--model", str(model), *data, "--backend", "openvino"]
    # refused before any data is read: NNCF takes min/max ranges; the IR is an .xml
    assert main([*cal, "--method", "entropy"]) == 2
    assert "not offered for openvino" in capsys.readouterr().err
    assert main([*cal, "--output", str(tmp_path / "q.onnx")]) == 2
    assert "written as a .xml file" in capsys.readouterr().err

    assert main(cal) == 0
    ir = imagenet / "resnet50_v1.int8.xml"
    assert ir.with_suffix(".bin").is_file()
    assert 'type="FakeQuantize"' in ir.read_text()
    record = json.loads((imagenet / "resnet50_v1.int8.xml.calibration.json").read_text())
    assert record["backend"] == "openvino" and record["recipe"].startswith("nncf")
    assert record["samples"]["used"] == 5 and record["qsl_indices"] == [0, 1, 2, 3, 4]

    common = ["-b", "resnet50", "--model", str(ir), *data, "--mode", "accuracy",
              "--backend", "openvino"]
    code, _ = run(tmp_path / "fp32", *common)
    assert code == 2  # the int8 IR is never run as "fp32"
    _, ref = run(tmp_path / "ref", "-b", "resnet50", "--model", str(model), *data,
                 "--mode", "accuracy", "--backend", "openvino")
    _, rec = run(tmp_path / "int8", *common, "--precision", "int8")
    assert rec["status"] == "ok", rec.get("error")
    assert rec["backend"]["calibration"]["recipe"] == record["recipe"]
    # where int8 has no VNNI, the run says what OpenVINO's int8 gains there (and what not)
    from mlharness.backends.openvino import NO_VNNI_NOTE
    from mlharness.hostinfo import matrix_isa

    no_vnni = matrix_isa()["int8"] == "avx2"
    assert rec["backend"].get("notes", []) == ([NO_VNNI_NOTE] if no_vnni else [])
    from mlharness.cli.run import show_record
    from mlharness.record import RunRecord

    capsys.readouterr()
    show_record(RunRecord.from_dict({**rec, "backend": {**rec["backend"],
                                                         "notes": [NO_VNNI_NOTE]}}), tmp_path)
    assert "note: this CPU has no VNNI" in capsys.readouterr().out
    assert rec["accuracy"]["value"] == pytest.approx(ref["accuracy"]["value"], abs=25)
    # onnxruntime cannot read the IR: a clear error, not a crash
    code, rec = run(tmp_path / "ort", *common[:-2], "--precision", "int8")
    assert code == 2 and "is an OpenVINO IR" in rec["error"]["message"]


@pytest.mark.slow
def test_pytorch_calibration_is_a_pt2e_program(imagenet: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchao")
    from mlharness.backends.torch_models import ResNet

    # torchvision's layout (the keys a resnet50 checkpoint has), random weights, a block per
    # stage and a quarter of the width: the same quantised patterns (conv+bn+relu, the
    # residual add, the 1000-way fc) in a graph a quarter the size, so export, calibration
    # and inductor's C++ take a fraction of ResNet-50's (test_resnet50_torchvision_state_dict
    # in tests/test_pytorch_backend.py runs the full-size one)
    checkpoint = tmp_path / "resnet50.pth"
    torch.save(ResNet((1, 1, 1, 1), classes=1000, base=16).state_dict(), checkpoint)
    data = ["--dataset", str(imagenet / "imagenet"), "--cache-dir", str(tmp_path / "cache"),
            "--task-option", "label_offset=0", "--task-option", "preprocessing=torchvision"]
    cal = ["calibrate", "-b", "resnet50", "--model", str(checkpoint), *data,
           "--backend", "pytorch"]
    # refused before any data is read: min/max ranges only; the program is a .pt2; the source
    # is the checkpoint, not an ONNX model
    assert main([*cal, "--method", "percentile"]) == 2
    assert "not offered for pytorch" in capsys.readouterr().err
    assert main([*cal, "--output", str(tmp_path / "q.onnx")]) == 2
    assert "written as a .pt2 file" in capsys.readouterr().err
    onnx_source = [a if a != str(checkpoint) else str(imagenet / "resnet50_v1.onnx") for a in cal]
    assert main(onnx_source) == 2
    assert "needs the fp32 checkpoint" in capsys.readouterr().err

    assert main(cal) == 0
    program = tmp_path / "resnet50.int8.pt2"
    # int8 weights, without the fp32 ones they replaced: a quarter of the checkpoint and a bit
    # (counted in the program's tensors: the file also holds the graph and the example inputs,
    # 1.5 MB whatever the model's size)
    from mlharness.backends.pytorch_int8 import load_exported

    saved = load_exported(program)
    held = [t for t in [*saved.state_dict.values(), *saved.constants.values()]
            if isinstance(t, torch.Tensor)]
    assert sum(t.numel() * t.element_size() for t in held) < 0.3 * checkpoint.stat().st_size
    assert program.stat().st_size < checkpoint.stat().st_size
    record = json.loads((tmp_path / "resnet50.int8.pt2.calibration.json").read_text())
    assert record["backend"] == "pytorch" and record["recipe"].startswith("torchao-pt2e")
    assert record["arch"] == "resnet50" and record["kept_fp32"] == []  # fc has 1000 outputs
    assert record["samples"]["official"] is True and record["qsl_indices"] == [0, 1, 2, 3, 4]
    from mlharness.hostinfo import matrix_isa

    assert record["reduce_range"] is (matrix_isa()["int8"] == "avx2")

    # what the load refuses (asked here, in this process: a run's worker relays a load's
    # refusal as exit 2, tests/test_pytorch_backend.py): the int8 program is never run as
    # "fp32", and a ResNet has no dynamic int8 (its int8 is calibrated)
    from mlharness.backends.base import BackendOptions
    from mlharness.backends.pytorch import PyTorchBackend
    from mlharness.errors import HarnessError

    with pytest.raises(HarnessError, match="is a calibrated int8 program"):
        PyTorchBackend().load(program, BackendOptions())
    with pytest.raises(HarnessError) as refused:
        PyTorchBackend().load(checkpoint, BackendOptions(precision="int8"))
    assert "mlharness calibrate" in str(refused.value.hint)
    common = ["-b", "resnet50", *data, "--mode", "accuracy", "--backend", "pytorch"]
    # SingleStream: the program is compiled for batches of one only (Offline adds the dynamic
    # batch graph: tests/test_pytorch_backend.py::test_bert_compiled_equals_onnx)
    _, rec = run(tmp_path / "int8", *common, "--model", str(program), "--precision", "int8",
                 "--scenario", "SingleStream")
    assert rec["status"] == "ok", rec.get("error")  # random weights: the accuracy FAILs
    assert rec["backend"]["compiled"] is True
    assert rec["backend"]["calibration"]["recipe"] == record["recipe"]
    assert "official calibration list" in weight_transformations("int8", rec["backend"])


def test_a_backend_without_a_quantiser_is_refused_naming_those_with_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Which backends calibrate is what their classes declare (``quantiser``), read through the
    registry: a backend that declares none is refused before anything is read, and the hint
    names the registered backends that do, in registry order."""
    from mlharness.backends import BACKENDS, quantising_backends
    from mlharness.calibration import CalibrationRequest, check_request
    from mlharness.errors import ConfigError

    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    assert quantising_backends() == ["onnxruntime", "openvino", "pytorch", "hf"]
    monkeypatch.setitem(BACKENDS, "openvino-again", BACKENDS["openvino"])
    for backend in ("noop", "openai", "mine.module:Backend"):
        with pytest.raises(ConfigError, match=f"calibration for backend {backend!r} is not "
                           "built") as exc:
            check_request(CalibrationRequest("demo", model, tmp_path, backend=backend))
        assert exc.value.hint == ("use --backend onnxruntime or openvino or pytorch or hf or "
                                  "openvino-again")
    assert not list(tmp_path.glob("*.int8.*"))


def test_progress_shows_each_step_once() -> None:
    from mlharness.cli.render import LiveProgress
    from mlharness.runner.execute import RunProgress

    with LiveProgress(enabled=True, lines=False) as bar:  # the bar, as on a terminal
        def steps(done: int, total: int, label: str) -> None:  # as calibrate_command hands it
            bar(RunProgress("prepare", done, total, label=label))

        steps(0, 3, "pre-processing images")
        steps(3, 3, "pre-processing images")
        [pre] = bar.progress.tasks
        assert (pre.completed, pre.total) == (3, 3)
        steps(0, 0, "quantising on 3 samples (onnxruntime)")  # no count: time only
        [quantising] = bar.progress.tasks
        assert quantising.description.startswith("quantising") and quantising.total is None
