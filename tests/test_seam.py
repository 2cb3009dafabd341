"""The inference seam and the task kinds, proven by a benchmark added as docs/architecture.md
says (tests/seam_tasks.py): its samples run through ``TensorTask.infer`` (three backend calls a
batch) in a real run, on a serve node and in calibration's batches; a variant borrows another
benchmark's rules; a missing rules entry is one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mlharness.backends.onnxruntime import OnnxRuntimeBackend
from mlharness.backends.base import BackendOptions
from mlharness.cli.main import main
from mlharness.errors import ConfigError
from mlharness.rules.loader import BenchmarkEntry
from mlharness.tasks import BENCHMARKS, GenerationTask, TaskOptions, TensorTask, create_task
from mlharness.tasks.demo import DEMO_MODEL


def _runtime() -> OnnxRuntimeBackend:
    backend = OnnxRuntimeBackend()
    backend.load(DEMO_MODEL, BackendOptions(threads=1))
    return backend


def test_a_task_makes_several_backend_calls_per_batch() -> None:
    task = create_task("seam_tasks:shifted", TaskOptions())
    assert isinstance(task, TensorTask) and not isinstance(task, GenerationTask)
    runtime = _runtime()
    calls: list[tuple[int, ...]] = []

    def predict(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        calls.append(inputs["image"].shape)
        return runtime.predict(inputs)

    indices = list(range(8))
    task.load_samples(indices)
    answers = task.infer(predict, indices)
    assert calls == [(8, 1, 8, 8)] * 3 and len(answers) == 8
    assert len(list(task.model_batches(indices))) == 3  # what calibration would feed
    # the ensemble answers differently from one call somewhere: the seam is what ran
    plain = create_task("demo", TaskOptions())
    plain.load_samples(range(450))
    every = list(range(450))
    task.load_samples(every)
    assert task.infer(runtime.predict, every) != plain.infer(runtime.predict, every)


def test_a_real_run_goes_through_the_seam(runs_dir: Path) -> None:
    code = main(["run", "-b", "seam_tasks:shifted", "--mode", "accuracy", "--no-progress",
                 "--output-dir", str(runs_dir), "--backend", "onnxruntime",
                 "--model", str(DEMO_MODEL)])
    assert code in (0, 1)
    [run] = [p for p in (runs_dir / "seam_tasks:shifted").iterdir() if p.is_dir()]
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "ok" and record["task"]["kind"] == "tensor"
    # the logged answers are the three-call ensemble's, sample by sample
    task = create_task("seam_tasks:shifted", TaskOptions())
    every = list(range(task.total_count()))
    task.load_samples(every)
    expected = task.infer(_runtime().predict, every)
    logged = {e["qsl_idx"]: bytes.fromhex(e["data"])
              for e in json.loads((run / "mlperf_log_accuracy.json").read_text())}
    assert [logged[i] for i in every] == expected
    assert (run / "accuracy.txt").read_text().strip() == task.score(
        [(i, expected[i]) for i in every]).text


def test_a_serve_node_answers_through_the_seam() -> None:
    from mlharness.serve.node import Node
    from mlharness.spec import RunSpec

    node = Node(RunSpec(benchmark="seam_tasks:shifted", backend="onnxruntime",
                        model=DEMO_MODEL), name="n1")
    node.load([0, 1, 2])
    task = create_task("seam_tasks:shifted", TaskOptions())
    task.load_samples([0, 1, 2])
    assert node.predict([0, 1, 2]) == task.infer(_runtime().predict, [0, 1, 2])


def test_a_variant_borrows_rules_and_a_missing_entry_is_one_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(BENCHMARKS, "digits-variant", BenchmarkEntry(
        "seam_tasks:variant", "digits under resnet50's rules", "Digits", rules="resnet50"))
    task = create_task("digits-variant", TaskOptions())
    assert task.name == "digits-variant" and task.rules is not None
    assert task.rules.name == "resnet" and task.describe()["rules"] == "resnet"
    monkeypatch.setitem(BENCHMARKS, "digits-orphan", BenchmarkEntry(
        "seam_tasks:variant", "rules nobody wrote", rules="no-such-benchmark"))
    with pytest.raises(ConfigError, match="no-such-benchmark is not a v6.1 benchmark"):
        create_task("digits-orphan", TaskOptions())


def test_a_benchmark_out_of_the_named_round_is_refused_before_anything_runs(
        runs_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "-b", "llama3.1-8b", "--round", "v4.1", "--backend", "openai",
                 "--backend-option", "endpoints=http://127.0.0.1:9", "--backend-option",
                 "served_model=m", "--dataset", str(runs_dir / "none.json"),
                 "--output-dir", str(runs_dir), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "not a v4.1 benchmark" in err
    assert not (runs_dir / "llama3.1-8b").exists()
