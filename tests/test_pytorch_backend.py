"""The PyTorch backend on the official PyTorch formats, generated here: a BERT checkpoint with
``bert_config.json`` (HF BertForQuestionAnswering keys, ``synthetic_squad.bert_checkpoint``) whose
weights are those of the synthetic ONNX BERT, so the logits must equal onnxruntime's; and a
torchvision-keyed ResNet-50 state dict."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import child_support
from mlharness.cli.main import main
from synthetic_squad import bert_checkpoint, make_bert_onnx, make_squad, make_vocab, vocab_size
from synthetic_vision import make_imagenet

torch = pytest.importorskip("torch", reason="the torch extra is not installed "
                                            "(pip install 'mlharness[torch]')")

#: one layer: what a compiled model or package proves holds for a BERT of any depth, and its
#: graph compiles in half the time of two
LAYERS, HIDDEN, HEADS, INTER = 1, 64, 4, 128


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("torch_bert")
    squad = make_squad(root / "dev-v1.1.json", articles=2, seed=11)
    vocab = make_vocab(root / "vocab.txt", squad)
    onnx_model = make_bert_onnx(root / "bert.onnx", vocab_size(vocab), layers=LAYERS,
                                hidden=HIDDEN, heads=HEADS, intermediate=INTER)
    bert_checkpoint(onnx_model, root / "ckpt", LAYERS, HIDDEN, HEADS, INTER, vocab_size(vocab))
    return root


def run(tmp_path: Path, *flags: str) -> tuple[int, dict, Path]:
    runs = tmp_path / "runs"
    code = main(["run", "--no-progress", "--output-dir", str(runs), "--test", *flags])
    dirs = sorted(p for p in runs.glob("[!_]*/*") if p.is_dir())  # not the _tune/ probes
    return code, json.loads((dirs[-1] / "run.json").read_text()) if dirs else {}, (
        dirs[-1] if dirs else runs)


def logits(run_dir: Path) -> dict[int, np.ndarray]:
    entries = json.loads((run_dir / "mlperf_log_accuracy.json").read_text())
    return {e["qsl_idx"]: np.frombuffer(bytes.fromhex(e["data"]), np.float32).reshape(384, 2)
            for e in entries}


def bert_flags(root: Path, model: str) -> list[str]:
    return ["-b", "bert-99", "--model", str(root / model), "--dataset",
            str(root / "dev-v1.1.json"), "--vocab", str(root / "vocab.txt"), "--cache-dir",
            str(root / "cache")]


ACCURACY = ["--mode", "accuracy", "--max-samples", "8", "--batch-size", "3"]


@pytest.fixture(scope="module")
def onnx_logits(bert: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[int, np.ndarray]:
    """onnxruntime's logits on the same weights: what every PyTorch path is compared with."""
    _, rec, ort_dir = run(tmp_path_factory.mktemp("ort"), *bert_flags(bert, "bert.onnx"),
                          *ACCURACY)
    assert rec["status"] == "ok", rec.get("error")
    return logits(ort_dir)


@pytest.fixture(scope="module")
def bf16_run(bert: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict, Path]:
    """The eager ``--precision bf16`` run, which two tests compare with (one run for both)."""
    return run(tmp_path_factory.mktemp("bf16"), *bert_flags(bert, "ckpt/model.pytorch"),
               *ACCURACY, "--backend", "pytorch", "--precision", "bf16")


def test_bert_checkpoint_equals_onnx(bert: Path, onnx_logits: dict, bf16_run: tuple,
                                     tmp_path: Path) -> None:
    _, rec, pt_dir = run(tmp_path / "pt", *bert_flags(bert, "ckpt/model.pytorch"), *ACCURACY,
                         "--backend", "pytorch")
    assert rec["status"] == "ok", rec.get("error")
    assert rec["backend"]["arch"] == "bert" and rec["task"]["sequence_length"] == "dynamic"
    a, b = onnx_logits, logits(pt_dir)
    for i in a:
        np.testing.assert_allclose(b[i], a[i], rtol=1e-3, atol=1e-3)
    from mlharness.backends.pytorch import bf16_supported

    code, rec, bf_dir = bf16_run
    if not bf16_supported():
        assert code == 2
        return
    assert rec["backend"]["autocast"] == "bf16"
    c = logits(bf_dir)
    for i in a:
        n = int((a[i][:, 0] > -10000).sum())
        assert np.abs(c[i][:n] - a[i][:n]).max() < 0.15 * a[i][:n].std() + 1e-2


def test_bert_dynamic_int8_stays_close_to_fp32(bert: Path, onnx_logits: dict, tmp_path: Path,
                                              capsys: pytest.CaptureFixture) -> None:
    """``--precision int8``: BERT's Linear layers quantised dynamically, the QA head in fp32;
    logits near fp32's (the trained fixture checks F1: tests/test_reduced_precision.py)."""
    _, rec, q_dir = run(tmp_path / "int8", *bert_flags(bert, "ckpt/model.pytorch"), *ACCURACY,
                        "--backend", "pytorch", "--precision", "int8")
    assert rec["status"] == "ok", rec.get("error")
    assert rec["backend"]["precision"] == "int8"
    assert rec["backend"]["quantization"].startswith("dynamic int8")
    a, q = onnx_logits, logits(q_dir)
    for i in a:
        n = int((a[i][:, 0] > -10000).sum())
        assert np.abs(q[i][:n] - a[i][:n]).max() < 0.25 * a[i][:n].std() + 1e-2
        assert not np.array_equal(q[i][:n], a[i][:n])  # really quantised
    code, _, _ = run(tmp_path / "c", *bert_flags(bert, "ckpt/model.pytorch"), *ACCURACY,
                     "--backend", "pytorch", "--precision", "int8",
                     "--backend-option", "compile=true")
    assert code == 2 and "compile=true" in capsys.readouterr().err


@pytest.mark.slow
def test_bert_bf16_package_runs_the_autocast_graph(bert: Path, onnx_logits: dict,
                                                  bf16_run: tuple, tmp_path: Path) -> None:
    """``--precision bf16 --backend-option package=true``: the package is compiled from the
    model under autocast (torch_models.Bf16Autocast), so its logits are bf16's: as near eager
    bf16's as two bf16 computations are, and not fp32's; its weights are moved like fp32's."""
    from mlharness.backends.pytorch import bf16_supported

    if not bf16_supported():
        pytest.skip("this CPU has no bf16 path in PyTorch (oneDNN): bf16 is refused here")
    flags = [*bert_flags(bert, "ckpt/model.pytorch"), *ACCURACY, "--backend", "pytorch",
             "--precision", "bf16"]
    _, rec, eager_dir = bf16_run
    assert rec["status"] == "ok", rec.get("error")
    # a cache of its own: test_bert_compiled_equals_onnx counts the packages in the shared one
    _, rec, package_dir = run(tmp_path / "package", *flags, "--backend-option", "package=true",
                              "--cache-dir", str(tmp_path / "cache"))
    assert rec["status"] == "ok", rec.get("error")
    assert rec["backend"]["autocast"] == "bf16" and rec["backend"]["precision"] == "bf16"
    package = rec["backend"]["compiled_package"]
    assert package["from_cache"] is False and package["aligned_weights"] is True
    assert Path(package["path"]).parent == tmp_path / "cache" / "torch-packages"
    eager, packaged = logits(eager_dir), logits(package_dir)
    for i, fp32 in onnx_logits.items():
        n = int((fp32[:, 0] > -10000).sum())
        assert np.abs(packaged[i][:n] - eager[i][:n]).max() < 0.15 * fp32[:n].std() + 1e-2
        assert not np.allclose(packaged[i][:n], fp32[:n], rtol=1e-4, atol=1e-4)  # really bf16


@pytest.mark.slow
def test_bert_compiled_equals_onnx(bert: Path, onnx_logits: dict, tmp_path: Path) -> None:
    """``--backend-option compile=true``: torch.compile, compiled at load once for a dynamic
    batch axis (Offline), the same logits; the tail batch of one (8 = 7 + 1) runs padded; two
    instances call the one compiled model from their own pinned workers.
    ``package=true``: compiled into a package kept in the cache, the same logits; a second
    run, Server (batches of one too), loads it instead of compiling."""
    import zipfile

    from torch._inductor.runtime.cache_dir_utils import cache_dir

    flags = [*bert_flags(bert, "ckpt/model.pytorch"), *ACCURACY[:-1], "7", "--backend",
             "pytorch", "--instances", "2"]
    _, rec, pt_dir = run(tmp_path / "pt", *flags, "--backend-option", "compile=true")
    assert rec["status"] == "ok", rec.get("error")
    assert rec["backend"]["compiled"] is True
    assert rec["backend"]["compiled_batches"] == ["dynamic"]
    assert rec["backend"]["compiled_package"] is None
    assert rec["sut"]["placement"]["shared_model"] is True
    _, rec, built_dir = run(tmp_path / "built", *flags, "--backend-option", "package=true")
    assert rec["status"] == "ok", rec.get("error")
    built = rec["backend"]["compiled_package"]
    assert built["from_cache"] is False and built["built_s"] > 0
    # torch_package_runner: every weight copied to aligned memory, the runtime's block freed
    assert built["aligned_weights"] is True and built["weights_not_moved"] == []
    package = Path(built["path"])
    assert package.parent == bert / "cache" / "torch-packages"
    assert [p.name for p in package.parent.iterdir()] == [package.name]  # nothing half-built
    # inductor's own copy of the library the package holds (weights included) is gone
    with zipfile.ZipFile(package) as archive:
        library = next(Path(n).name for n in archive.namelist() if n.endswith(".wrapper.so"))
    assert not list(Path(cache_dir()).glob(f"*/{library}"))
    assert rec["backend"]["compiled"] is True and rec["backend"]["compiled_batches"] is None
    assert "later runs with package=true load it" in rec["backend"]["notes"][0]
    _, rec, server_dir = run(tmp_path / "server", *flags, "--backend-option", "package=true",
                             "-s", "Server", "--target-qps", "50")
    assert rec["status"] == "ok", rec.get("error")
    assert rec["backend"]["compiled_package"] == {**built, "from_cache": True, "built_s": None}
    assert rec["backend"]["notes"] == [f"the compiled model was loaded from {package}"]
    for run_dir in (pt_dir, built_dir, server_dir):
        b = logits(run_dir)
        for i in onnx_logits:
            np.testing.assert_allclose(b[i], onnx_logits[i], rtol=1e-3, atol=1e-3)


def test_a_changed_model_never_loads_a_stale_package(tmp_path: Path) -> None:
    """A package is named by the model's bytes, what the backend derived from it, torch and
    the CPU: another file of the same name gets its own. A package that does not load is built
    again (the build is test_bert_compiled_equals_onnx's), and what a killed build left goes."""
    import socket

    from mlharness.backends.torch_package import BUILDING, load_or_build, package_path
    from mlharness.errors import ModelError

    model = tmp_path / "model.pth"
    model.write_bytes(b"one")
    first = package_path(tmp_path, model, {"arch": "resnet50"})
    assert package_path(tmp_path, model, {"arch": "resnet50"}) == first
    assert package_path(tmp_path, model, {"arch": "bert"}) != first
    model.write_bytes(b"two")
    assert package_path(tmp_path, model, {"arch": "resnet50"}) != first

    first.parent.mkdir(parents=True)
    first.write_bytes(b"truncated")
    killed = first.parent / f"{BUILDING}{socket.gethostname()}-999999999"
    killed.mkdir()
    (killed / first.name).write_bytes(b"partial")
    elsewhere = first.parent / f"{BUILDING}another-host-999999999"  # not ours to judge
    elsewhere.mkdir()

    # a build runs in a process of its own (child_support: functions it can import)
    with pytest.raises(ModelError, match="exported again"):
        load_or_build(first, child_support.export_fails, runners=1)
    assert list(first.parent.iterdir()) == [elsewhere]
    # a build killed (the out-of-memory killer) is named, and what it left goes at once
    with pytest.raises(ModelError, match=r"^compiling the model failed: the package build "
                                         r"process was killed by SIGKILL \(out of memory\?\)"):
        load_or_build(first, child_support.kill_self, runners=1)
    assert list(first.parent.iterdir()) == [elsewhere]


@pytest.mark.parametrize("option", ["compile", "package"])
def test_compiling_without_a_compiler_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              option: str) -> None:
    from mlharness.backends.base import BackendOptions
    from mlharness.backends.pytorch import PyTorchBackend
    from mlharness.backends.torch_models import ResNet
    from mlharness.errors import ConfigError

    torch.save(ResNet((1,), classes=10, base=4).state_dict(), tmp_path / "tiny.pth")
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(ConfigError, match="needs a C\\+\\+ compiler"):
        PyTorchBackend().load(tmp_path / "tiny.pth", BackendOptions(
            cache_dir=tmp_path / "cache", extra={option: True}))


@pytest.mark.slow
def test_every_compiled_model_is_compiled_and_instances_share_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Models compiled in one process keep their graphs on one forward code object, and past
    dynamo's limit per code object (8) the rest would run eager, silently, while run.json says
    compiled. Here the limit is 1, so without the backend raising it the second would not
    compile. ``--instances N`` shares the first instance's compiled model: no third graph."""
    from torch._dynamo.utils import counters

    from mlharness.backends import torch_compile
    from mlharness.backends.base import BackendOptions
    from mlharness.backends.pytorch import PyTorchBackend
    from mlharness.backends.torch_models import ResNet

    torch.save(ResNet((1,), classes=10, base=4).state_dict(), tmp_path / "tiny.pth")
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 1)
    monkeypatch.setattr(torch_compile, "graphs_compiled", 0)
    before = counters["stats"]["unique_graphs"]
    options = BackendOptions(scenario="Offline", threads=1, extra={"compile": True})
    loaded = []
    for _ in range(2):  # Offline: one graph each, for a dynamic batch axis
        backend = PyTorchBackend()
        backend.load(tmp_path / "tiny.pth", options)
        assert backend.compiled_batches == [2]
        loaded.append(backend)
    assert counters["stats"]["unique_graphs"] - before == 2
    shared = PyTorchBackend()
    # the same threads as every instance: dynamo guards on torch's thread count
    shared.load_shared(loaded[1], BackendOptions(scenario="Offline", threads=1, cpus=[0],
                                                 extra={"compile": True}))
    images = {"input_tensor:0": np.random.default_rng(0).random((3, 3, 224, 224), np.float32)}
    np.testing.assert_array_equal(shared.predict(images)["softmax_tensor:0"],
                                  loaded[1].predict(images)["softmax_tensor:0"])
    assert counters["stats"]["unique_graphs"] - before == 2
    assert shared.forward is loaded[1].forward and shared.describe()["compiled"] is True
    # package=true: the channels-last ResNet exported with a dynamic batch, the same answers
    packaged = PyTorchBackend()
    packaged.load(tmp_path / "tiny.pth", BackendOptions(threads=1, cache_dir=tmp_path / "cache",
                                                        extra={"package": True}))
    package = packaged.describe()["compiled_package"]
    assert package["from_cache"] is False and package["aligned_weights"] is True
    assert package["weights_not_moved"] == []
    for batch in (1, 3):
        some = {"input_tensor:0": images["input_tensor:0"][:batch]}
        np.testing.assert_allclose(packaged.predict(some)["softmax_tensor:0"],
                                   loaded[1].predict(some)["softmax_tensor:0"], atol=1e-6)


# Offline: every accuracy run of this module is one (the backend does not know the mode)
@pytest.mark.parametrize("scenario, flags", [
    ("SingleStream", ["--target-latency", "2"]), ("Server", ["--target-qps", "30"]),
    pytest.param("MultiStream", ["--target-latency", "5", "--min-query-count", "30"],
                 marks=pytest.mark.slow)])
def test_bert_every_scenario(bert: Path, tmp_path: Path, scenario: str, flags: list) -> None:
    _, rec, _ = run(tmp_path, *bert_flags(bert, "ckpt/model.pytorch"), "-s", scenario, *flags,
                    "--backend", "pytorch")
    assert rec["status"] == "ok", rec.get("error")
    assert rec["result"]["errors"] == [] and rec["result"]["latencies_ms"]["p99.00"] > 0


def test_missing_config_and_onnx_refused(bert: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture) -> None:
    """What the load refuses, said with a hint; a run says it on stderr and exits 2 (shown here
    for package=true, where the build's process says it: the run itself never builds the
    module; a run's worker relays a load's refusal as test_bert_dynamic_int8_stays_close_to_fp32
    shows). The load is called in this process: a worker each would only repeat that relay."""
    from mlharness.backends.base import BackendOptions
    from mlharness.backends.pytorch import PyTorchBackend
    from mlharness.errors import ModelError

    def refusal(model: Path, **extra: bool) -> ModelError:
        with pytest.raises(ModelError) as exc:
            PyTorchBackend().load(model, BackendOptions(extra=extra))
        return exc.value

    said = refusal(bert / "bert.onnx")
    assert "not ONNX" in str(said) and "--backend onnxruntime" in str(said.hint)
    lone = tmp_path / "model.pytorch"
    lone.write_bytes((bert / "ckpt" / "model.pytorch").read_bytes())
    said = refusal(lone)  # no bert_config.json beside it
    assert "bert_config.json" in str(said) and "bert_config.json" in str(said.hint)
    # a weight missing: said by the load, or with package=true by the build's process
    short = tmp_path / "short"
    short.mkdir()
    state = torch.load(bert / "ckpt" / "model.pytorch", weights_only=True)
    del state["qa_outputs.bias"]
    torch.save(state, short / "model.pytorch")
    (short / "bert_config.json").write_text((bert / "ckpt" / "bert_config.json").read_text())
    said = refusal(short / "model.pytorch", compile=False)
    assert "lacks 1 weight(s), e.g. qa_outputs.bias" in str(said)
    assert "pass the checkpoint of this architecture" in str(said.hint)
    flags = bert_flags(bert, "x")
    flags[flags.index("--model") + 1] = str(short / "model.pytorch")
    code, _, _ = run(tmp_path / "package", *flags, "--backend", "pytorch",
                     "--backend-option", "package=true")
    err = capsys.readouterr().err
    assert code == 2 and "lacks 1 weight(s), e.g. qa_outputs.bias" in err, err
    assert "hint: pass the checkpoint of this architecture" in err


@pytest.mark.slow
def test_resnet50_torchvision_state_dict(tmp_path: Path) -> None:
    from mlharness.backends.torch_models import resnet50

    net = resnet50()
    state = net.state_dict()
    # torchvision.models.resnet50().state_dict(): 320 tensors, 25,557,032 parameters
    assert len(state) == 320
    assert sum(p.numel() for p in net.parameters()) == 25_557_032
    torch.save(state, tmp_path / "resnet50.pth")
    entries = make_imagenet(tmp_path / "imagenet", count=6)
    common = ["-b", "resnet50", "--model", str(tmp_path / "resnet50.pth"), "--dataset",
              str(tmp_path / "imagenet"), "--cache-dir", str(tmp_path / "cache"),
              "--backend", "pytorch", "--task-option", "label_offset=0",
              "--task-option", "preprocessing=torchvision"]
    _, rec, run_dir = run(tmp_path, *common, "--mode", "accuracy", "--batch-size", "4")
    assert rec["status"] == "ok", rec.get("error")
    assert rec["backend"]["arch"] == "resnet50"
    assert rec["task"]["preprocessing"]["name"] == "torchvision"
    got = {e["qsl_idx"]: int(np.frombuffer(bytes.fromhex(e["data"]), np.float32)[0])
           for e in json.loads((run_dir / "mlperf_log_accuracy.json").read_text())}
    from mlharness.tasks.vision.preprocessing import PRESETS, ImagePreprocessor

    prep = ImagePreprocessor(PRESETS["torchvision"])
    net.eval()
    with torch.inference_mode():
        for i, (name, _) in enumerate(entries):
            x = torch.from_numpy(prep(tmp_path / "imagenet" / name)[None])
            assert got[i] == int(net(x).argmax(1))
