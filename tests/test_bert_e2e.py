"""BERT end to end through ``mlharness run`` on synthetic SQuAD data and a tiny random BERT."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from mlharness.cli.main import main
from mlharness.tasks.question_answering.task import BertSquadTask
from synthetic_squad import make_bert_onnx, make_squad, make_vocab, vocab_size

#: tools/submission/submission_checker/constants.py, the F1 pattern of ACC_PATTERN
CHECKER_F1 = re.compile(r"^{[\"']exact_match[\"']\:\s*[\d\.]+,\s*[\"']f1[\"']\:\s*([\d\.]+)}")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bert")
    squad = make_squad(root / "dev-v1.1.json", articles=3, seed=21)
    vocab = make_vocab(root / "vocab.txt", squad)
    make_bert_onnx(root / "bert.onnx", vocab_size(vocab))
    make_bert_onnx(root / "bert_fixed.onnx", vocab_size(vocab), fixed_seq=384)
    make_bert_onnx(root / "bert_single.onnx", vocab_size(vocab), single_output=True)
    return root


def run(data: Path, tmp_path: Path, *flags: str, model: str = "bert.onnx",
        benchmark: str = "bert-99") -> tuple[int, Path]:
    runs = tmp_path / "runs"
    code = main(["run", "-b", benchmark, "--model", str(data / model), "--dataset",
                 str(data / "dev-v1.1.json"), "--vocab", str(data / "vocab.txt"),
                 "--cache-dir", str(data / "cache"), "--no-progress", "--output-dir", str(runs),
                 "--test", *flags])
    dirs = sorted(p for p in (runs / benchmark).iterdir() if p.is_dir()) if (runs / benchmark).is_dir() else []
    return code, dirs[-1] if dirs else runs


def logged(run_dir: Path) -> dict[int, np.ndarray]:
    entries = json.loads((run_dir / "mlperf_log_accuracy.json").read_text())
    return {e["qsl_idx"]: np.frombuffer(bytes.fromhex(e["data"]), np.float32).reshape(384, 2)
            for e in entries}


def test_accuracy_offline(data: Path, tmp_path: Path) -> None:
    code, run_dir = run(data, tmp_path, "--scenario", "Offline", "--mode", "accuracy",
                        "--batch-size", "4")
    text = (run_dir / "accuracy.txt").read_text().strip().splitlines()[0]
    assert CHECKER_F1.match(text)
    record = json.loads((run_dir / "run.json").read_text())
    task = BertSquadTask("bert-99", data / "dev-v1.1.json", data / "vocab.txt",
                         cache_dir=data / "cache")
    logs = logged(run_dir)
    assert sorted(logs) == list(range(task.total_count()))
    assert text == task.score([(i, a.tobytes()) for i, a in logs.items()]).text
    assert record["accuracy"]["passed"] is False and code == 1  # random weights fail 89.97
    assert record["task"]["sequence_length"] == "dynamic"
    assert record["backend"]["precision"] == "fp32"
    # past each sample's own length the response holds the accuracy script's pad value
    for i, arr in logs.items():
        assert (arr[task.features.seq_len[i]:] == -10000.0).all()


def test_fixed_and_dynamic_agree(data: Path, tmp_path: Path) -> None:
    _, dyn = run(data, tmp_path, "--mode", "accuracy", "--max-samples", "12")
    _, fixed = run(data, tmp_path, "--mode", "accuracy", "--max-samples", "12",
                   "--batch-size", "1", "--no-length-sort", model="bert_fixed.onnx")
    assert json.loads((fixed / "run.json").read_text())["task"]["sequence_length"] == "fixed"
    task = BertSquadTask("bert-99", data / "dev-v1.1.json", data / "vocab.txt",
                         cache_dir=data / "cache")
    a, b = logged(dyn), logged(fixed)
    for i in a:
        n = task.features.seq_len[i]
        np.testing.assert_allclose(a[i][:n], b[i][:n], rtol=1e-4, atol=1e-4)


def test_single_output_model_and_int8(data: Path, tmp_path: Path) -> None:
    code, run_dir = run(data, tmp_path, "--mode", "accuracy", "--max-samples", "6",
                        "--precision", "int8", model="bert_single.onnx")
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "ok" and record["backend"]["precision"] == "int8"
    assert record["backend"]["model_run"].endswith(".onnx") and "int8" in record["backend"]["model_run"]
    assert len(logged(run_dir)) == 6


def test_bf16_refused(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code, _ = run(data, tmp_path, "--mode", "accuracy", "--max-samples", "2", "--precision", "bf16")
    assert code == 2 and "bf16" in capsys.readouterr().err


def test_dynamic_refused_for_fixed_model(data: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture) -> None:
    code, _ = run(data, tmp_path, "--max-samples", "2", "--task-option",
                  "sequence_length=dynamic", model="bert_fixed.onnx")
    assert code == 2 and "fixed sequence length" in capsys.readouterr().err


@pytest.mark.parametrize("scenario, flags", [
    ("SingleStream", ["--target-latency", "5"]),
    ("Server", ["--target-qps", "40"]),
    ("Offline", ["--target-qps", "100"]),
    # exactly 50 queries instead of the 662 early stopping needs: this checks the wiring, not
    # validity (no minimum duration, or a fast machine would fit 662 into --test's 2 s)
    pytest.param("MultiStream", ["--target-latency", "20", "--min-query-count", "50",
                                 "--min-duration", "0"],
                 marks=pytest.mark.slow),
])
def test_performance_scenarios(data: Path, tmp_path: Path, scenario: str,
                               flags: list[str]) -> None:
    code, run_dir = run(data, tmp_path, "--scenario", scenario, *flags, benchmark="bert-99.9")
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "ok", record.get("error")
    result = record["result"]
    assert result["errors"] == [] and result["latencies_ms"]["p99.00"] > 0
    if scenario == "MultiStream":  # 50 queries: too few for the early-stopping estimate
        assert any("early stopping" in r for r in result["reasons"])
    else:
        assert result["value"] > 0
    assert "bert." + scenario in (run_dir / "user.conf").read_text()
