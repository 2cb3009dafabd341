"""The OpenVINO backend through ``mlharness run``: every scenario, the demo, a ResNet50-shaped and
a BERT-shaped model (dynamic sequence length), bf16 where the CPU has it, int8 only calibrated."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mlharness.backends.openvino import ONE_ARENA_NOTE
from mlharness.cli.main import main
from mlharness.hostinfo import matrix_isa
from synthetic_squad import make_bert_onnx, make_squad, make_vocab, vocab_size
from synthetic_vision import make_imagenet, resnet50_onnx

ov = pytest.importorskip("openvino", reason="the openvino extra is not installed "
                                            "(pip install 'mlharness[openvino]')")

SCENARIO_FLAGS = {
    "SingleStream": ["--target-latency", "1"],
    # --test's 662 queries: the fewest that give MultiStream's early-stopping estimate (a
    # value) on any machine; fewer gave none when a loaded machine fit fewer into 2 s
    "MultiStream": ["--target-latency", "2"],
    "Server": ["--target-qps", "50"],
    "Offline": ["--target-qps", "200"],
}


def ov_bf16() -> bool:
    return "BF16" in [str(c) for c in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")]


def run(tmp_path: Path, *flags: str) -> tuple[int, dict, Path]:
    runs = tmp_path / "runs"
    code = main(["run", "--no-progress", "--output-dir", str(runs), "--test", *flags])
    dirs = sorted(p for p in runs.glob("[!_]*/*") if p.is_dir())  # not the _tune/ probes
    record = json.loads((dirs[-1] / "run.json").read_text()) if dirs else {}
    return code, record, dirs[-1] if dirs else runs


def logged(run_dir: Path) -> dict[int, bytes]:
    entries = json.loads((run_dir / "mlperf_log_accuracy.json").read_text())
    return {e["qsl_idx"]: bytes.fromhex(e["data"]) for e in entries}


@pytest.mark.parametrize("scenario", list(SCENARIO_FLAGS))
def test_demo_every_scenario_with_its_hint(tmp_path: Path, scenario: str) -> None:
    code, record, _ = run(tmp_path, "-b", "demo", "--backend", "openvino", "-s", scenario,
                          *SCENARIO_FLAGS[scenario])
    assert record["status"] == "ok", record.get("error")
    assert record["result"]["errors"] == [] and record["result"]["value"] > 0
    backend = record["backend"]
    assert backend["name"] == "openvino"
    want = "THROUGHPUT" if scenario in ("Offline", "Server") else "LATENCY"
    assert backend["compiled"]["PERFORMANCE_HINT"] == want
    assert backend["compiled"]["INFERENCE_PRECISION_HINT"] == "f32"  # pinned, never bf16 silently
    assert record["system"]["cpu_matrix"] == matrix_isa()


def test_demo_accuracy_same_as_onnxruntime(tmp_path: Path) -> None:
    _, ort_rec, ort_dir = run(tmp_path / "ort", "-b", "demo", "--mode", "accuracy")
    _, ov_rec, ov_dir = run(tmp_path / "ov", "-b", "demo", "--mode", "accuracy",
                            "--backend", "openvino", "--batch-size", "7")
    assert ov_rec["status"] == "ok"
    assert ov_rec["accuracy"]["value"] == ort_rec["accuracy"]["value"]
    assert logged(ov_dir) == logged(ort_dir)


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ov_vision")
    make_imagenet(root / "imagenet", count=12)
    resnet50_onnx(root / "resnet50_v1.onnx")
    return root


def test_resnet50_shaped_batches_split_over_streams(imagenet: Path, tmp_path: Path) -> None:
    common = ["-b", "resnet50", "--model", str(imagenet / "resnet50_v1.onnx"), "--dataset",
              str(imagenet / "imagenet"), "--cache-dir", str(imagenet / "cache"),
              "--mode", "accuracy", "--batch-size", "5"]
    _, ort_rec, ort_dir = run(tmp_path / "ort", *common)
    _, ov_rec, ov_dir = run(tmp_path / "ov", *common, "--backend", "openvino",
                            "--backend-option", "num_streams=2")
    assert ov_rec["status"] == "ok", ov_rec.get("error")
    assert ov_rec["backend"]["compiled"]["NUM_STREAMS"] == "2"
    assert logged(ov_dir) == logged(ort_dir)


@pytest.fixture(scope="module")
def squad(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ov_bert")
    make_squad(root / "dev-v1.1.json", articles=2, seed=5)
    vocab = make_vocab(root / "vocab.txt", root / "dev-v1.1.json")
    make_bert_onnx(root / "bert.onnx", vocab_size(vocab))
    return root


def bert(squad: Path, *flags: str) -> list[str]:
    return ["-b", "bert-99", "--model", str(squad / "bert.onnx"), "--dataset",
            str(squad / "dev-v1.1.json"), "--vocab", str(squad / "vocab.txt"), "--cache-dir",
            str(squad / "cache"), *flags]


def logits(run_dir: Path) -> dict[int, np.ndarray]:
    return {i: np.frombuffer(b, np.float32).reshape(384, 2) for i, b in logged(run_dir).items()}


def test_bert_dynamic_length_matches_onnxruntime(squad: Path, tmp_path: Path) -> None:
    flags = bert(squad, "--mode", "accuracy", "--max-samples", "10", "--batch-size", "4")
    _, _, ort_dir = run(tmp_path / "ort", *flags)
    _, rec, ov_dir = run(tmp_path / "ov", *flags, "--backend", "openvino")
    assert rec["status"] == "ok" and rec["task"]["sequence_length"] == "dynamic"
    a, b = logits(ort_dir), logits(ov_dir)
    for i in a:
        np.testing.assert_allclose(b[i], a[i], rtol=1e-3, atol=1e-3)
    if not ov_bf16():
        code, rec, _ = run(tmp_path / "bf16", *flags, "--backend", "openvino",
                           "--precision", "bf16")
        assert code == 2  # refused with a reason, never emulated silently
        return
    _, rec, bf_dir = run(tmp_path / "bf16", *flags, "--backend", "openvino",
                         "--precision", "bf16")
    assert rec["status"] == "ok" and rec["backend"]["precision"] == "bf16"
    assert rec["backend"]["compiled"]["INFERENCE_PRECISION_HINT"] == "bf16"
    c = logits(bf_dir)
    for i in a:  # bf16 keeps 8 bits of mantissa: close to fp32, not equal
        n = int((a[i][:, 0] > -10000).sum())
        assert np.abs(c[i][:n] - a[i][:n]).max() < 0.1 * a[i][:n].std() + 1e-2


@pytest.mark.parametrize("scenario", list(SCENARIO_FLAGS))
def test_bert_every_scenario(squad: Path, tmp_path: Path, scenario: str) -> None:
    code, rec, _ = run(tmp_path, *bert(squad, "-s", scenario, *SCENARIO_FLAGS[scenario],
                                       "--backend", "openvino"))
    assert rec["status"] == "ok", rec.get("error")
    assert rec["result"]["errors"] == [] and rec["result"]["latencies_ms"]["p99.00"] > 0


def test_int8_needs_a_calibrated_model(squad: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture) -> None:
    code, _, _ = run(tmp_path, *bert(squad, "--max-samples", "2", "--backend", "openvino",
                                     "--precision", "int8"))
    err = capsys.readouterr().err
    assert code == 2 and "mlharness calibrate" in err


def test_unquantised_bf16_is_for_int8_only(squad: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture) -> None:
    code, _, _ = run(tmp_path, *bert(squad, "--max-samples", "2", "--backend", "openvino",
                                     "--backend-option", "unquantised=bf16"))
    err = capsys.readouterr().err
    assert code == 2 and "unquantised=bf16 is for int8 models, not --precision fp32" in err


def test_int8_without_vnni_is_noted() -> None:
    from mlharness.backends.openvino import NO_VNNI_NOTE, precision_notes

    assert precision_notes("int8", "avx2") == [NO_VNNI_NOTE]
    for precision, isa in (("int8", "avx512_vnni"), ("int8", "amx"), ("int8", "avx_vnni"),
                           ("fp32", "avx2"), ("bf16", "amx")):
        assert precision_notes(precision, isa) == []


#: in a fresh interpreter: where a thread's malloc lands, with or without one_malloc_arena()
HEAP_PROBE = """
import ctypes, sys, threading
from mlharness.backends.openvino import one_malloc_arena
libc = ctypes.CDLL(None)
libc.malloc.restype = libc.sbrk.restype = ctypes.c_void_p
libc.malloc.argtypes, libc.sbrk.argtypes = [ctypes.c_size_t], [ctypes.c_ssize_t]
applied = one_malloc_arena() if sys.argv[1] == "one" else None
got = []
worker = threading.Thread(target=lambda: got.append(libc.malloc(64 * 1024)))
worker.start(); worker.join()
print(applied, got[0] < libc.sbrk(0))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_one_malloc_arena_puts_threads_on_the_main_heap() -> None:
    """Issue 38's workaround: a thread's buffers come from the main heap (below the program
    break, whose top keeps free room) instead of a thread heap that ends where its buffer does."""
    def probe(mode: str) -> str:
        return subprocess.run([sys.executable, "-c", HEAP_PROBE, mode], capture_output=True,
                              text=True, check=True).stdout.split()

    assert probe("one") == ["True", "True"]
    assert probe("default") == ["None", "False"]  # the probe sees the difference


def test_snippets_option_is_recorded(squad: Path, tmp_path: Path) -> None:
    _, rec, _ = run(tmp_path, *bert(squad, "--mode", "accuracy", "--max-samples", "2",
                                    "--backend", "openvino", "--backend-option",
                                    "snippets=false"))
    assert rec["status"] == "ok", rec.get("error")
    assert rec["backend"]["config"]["SNIPPETS_MODE"] == "DISABLE"
    assert rec["backend"]["snippets"] == "snippets off: --backend-option snippets=false"
    if platform.libc_ver()[0] == "glibc":  # the worker took one arena before its threads
        assert rec["backend"]["process"] == ONE_ARENA_NOTE
