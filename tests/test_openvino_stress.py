"""Stress: OpenVINO BERT runs with dynamic sequence lengths on two streams, each precision the CPU
has, warm-up and Offline, repeated with one engine thread (the default: each batch split over both
streams) and two in turn; every run must end ``ok``.

Issue 38: on an AVX-512 CPU without AMX, OpenVINO 2026.4.1 killed BERT-large runs by SIGSEGV now
and then: a stream thread's JIT matmul kernel read past the end of a buffer that ended a glibc
thread heap. The worker now takes one malloc arena (backends/openvino.py, one_malloc_arena). The
suite keeps a short form (a small model, two runs per precision); the long form, with the
BERT-large shape (what was measured: docs/performance.md):

    OV_STRESS_RUNS=20 OV_STRESS_SHAPE=24,1024,16,4096 \\
        .venv/bin/python -m pytest -q tests/test_openvino_stress.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mlharness.cli.main import main
from synthetic_squad import make_bert_onnx, make_squad, make_vocab

ov = pytest.importorskip("openvino", reason="the openvino extra is not installed "
                                            "(pip install 'mlharness[openvino]')")

RUNS = int(os.environ.get("OV_STRESS_RUNS", "2"))
#: layers, hidden, heads, intermediate (default: small, seconds a run)
SHAPE = tuple(int(x) for x in os.environ.get("OV_STRESS_SHAPE", "4,256,4,1024").split(","))
SAMPLES = 24


def has_bf16() -> bool:
    return "BF16" in [str(c) for c in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")]


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bert_cpu.py's SQuAD-length set (one question per context: 24 features of many widths)
    and a BERT-shaped model of ``SHAPE`` with random weights."""
    root = tmp_path_factory.mktemp("ov_stress")
    make_squad(root / "dev-v1.1.json", articles=2, paragraphs=12, questions=1, seed=7,
               long_every=10_000, short_words=(50, 170))
    make_vocab(root / "vocab.txt", root / "dev-v1.1.json", whole_word_share=0.95)
    layers, hidden, heads, intermediate = SHAPE
    make_bert_onnx(root / "bert.onnx", 30522, layers=layers, hidden=hidden, heads=heads,
                   intermediate=intermediate, seed=1)
    return root


def data_flags(root: Path) -> list[str]:
    return ["--dataset", str(root / "dev-v1.1.json"), "--vocab", str(root / "vocab.txt"),
            "--cache-dir", str(root / "cache")]


def int8_model(root: Path) -> Path:
    """The NNCF IR ``mlharness calibrate --backend openvino`` writes (once)."""
    pytest.importorskip("nncf")
    ir = root / "bert.int8.xml"
    if not ir.is_file():  # the synthetic set holds none of the official list's features
        (root / "calibration.txt").write_text("0\n3\n6\n9\n")
        assert main(["calibrate", "-b", "bert-99", "--model", str(root / "bert.onnx"),
                     *data_flags(root), "--backend", "openvino", "--calibration-list",
                     str(root / "calibration.txt")]) == 0
    return ir


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_bert_runs_never_crash(bert: Path, tmp_path: Path, precision: str) -> None:
    if precision == "bf16" and not has_bf16():
        pytest.skip("no bf16 path in OpenVINO on this CPU")
    model = int8_model(bert) if precision == "int8" else bert / "bert.onnx"
    failures = []
    for k in range(RUNS):
        runs, workers = tmp_path / f"runs{k}", 1 + k % 2
        code = main(["run", "--no-progress", "--output-dir", str(runs), "--test", "-b", "bert-99",
                     "-s", "Offline", "--backend", "openvino", "--model", str(model),
                     *data_flags(bert), "--precision", precision, "--max-samples", str(SAMPLES),
                     "--target-qps", "0.001", "--min-duration", "0", "--min-query-count",
                     str(SAMPLES), "--performance-sample-count", str(SAMPLES),
                     "--batch-size", "4", "--workers", str(workers), "--stall-timeout", "600"])
        record = json.loads(next(runs.glob("bert-99/*/run.json")).read_text())
        if code != 0 or record["status"] != "ok":
            failures.append(f"run {k + 1} ({workers} engine threads): "
                            f"{(record.get('error') or {}).get('message')}")
            continue
        assert record["sut"]["workers"] == workers and record["sut"]["warmup_shapes"] > 1
        assert record["backend"]["compiled"]["NUM_STREAMS"] == "2"
        assert record["result"]["value"] > 0
    assert not failures, f"{len(failures)} of {RUNS} runs failed:\n" + "\n".join(failures)
