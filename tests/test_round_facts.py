"""Round facts live only in rules/*.toml; tasks, compliance and the registry read them there;
model files are introspected by the backend that runs them, never by a task."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlharness import rules
from mlharness.backends import declared_inputs, framework_of
from mlharness.compliance.audit_config import TEST01_SAMPLING_TARGET, audit_config
from mlharness.compliance.required import required_tests
from mlharness.errors import ConfigError
from mlharness.hostinfo import software
from mlharness.tasks import BENCHMARKS, TaskOptions, create_task
from mlharness.tensors import TensorSpec


def test_rounds_are_the_rule_files_and_the_newest_is_the_default() -> None:
    files = sorted(p.stem for p in Path(rules.__file__).parent.glob("v*.toml"))
    assert sorted(rules.ROUNDS) == files
    assert rules.DEFAULT_ROUND == rules.ROUNDS[0] == "v6.1"
    assert rules.load().loadgen_version == "6.0.17"
    with pytest.raises(ConfigError, match="unknown round"):
        required_tests("resnet50", "v4.2")  # no rules file, no fallback table


def test_tasks_take_targets_and_counts_from_the_rules(tmp_path: Path) -> None:
    from synthetic_vision import make_imagenet

    make_imagenet(tmp_path / "i", 4)
    task = create_task("resnet50", TaskOptions(dataset=tmp_path / "i"))
    resnet = rules.facts("resnet50")
    assert task.target == pytest.approx(resnet.accuracy_reference * resnet.accuracy_fraction)
    assert task.performance_count() <= resnet.performance_sample_count
    assert rules.facts("retinanet").performance_sample_count == 64  # from v6.0 (retired in v6.1)
    assert rules.facts("no-such-benchmark") is None


def test_registry_and_audit_values_are_rules_data() -> None:
    assert set(BENCHMARKS) == {"demo", *rules.loader.task_entries()}
    assert TEST01_SAMPLING_TARGET["resnet50"] == rules.load().audit["test01_sampling_target"]["resnet50"]
    assert "*.*.accuracy_log_sampling_target = 4096" in audit_config("TEST01", "demo").render()


def test_backend_reads_declared_inputs_and_names_the_framework(tmp_path: Path) -> None:
    from synthetic_squad import make_bert_onnx

    model = make_bert_onnx(tmp_path / "fixed.onnx", 3000, fixed_seq=384)
    got = declared_inputs("onnxruntime", model)
    assert TensorSpec("input_ids", "int64", (None, 384)) in got
    assert declared_inputs("noop", model) is None and declared_inputs("onnxruntime", None) is None
    assert framework_of("onnxruntime").startswith("ONNX Runtime ")
    assert software()["framework"] == "unknown"  # hostinfo never guesses the framework
    assert software("OpenVINO 2025.1")["framework"] == "OpenVINO 2025.1"

