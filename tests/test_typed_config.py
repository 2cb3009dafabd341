"""Typed configuration: RunSpec and option models refuse bad input by name; one effective-settings
decision feeds user.conf and the preflight; the run record round-trips with its format version."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mlharness import rules
from mlharness.loadgen.mllog import LoadGenResult
from mlharness.backends import BackendOptions, backend_options
from mlharness.backends.onnxruntime import OnnxRuntimeBackend, OnnxRuntimeOptions
from mlharness.cli.main import main
from mlharness.distribution import Distribution
from mlharness.errors import ConfigError
from mlharness.flags import command_words, user_conf_owners
from mlharness.options import FreeOptions
from mlharness.loadgen.settings import USER_CONF_KEYS, user_conf_entries
from mlharness.record import RUN_FORMAT, RunRecord
from mlharness.spec import RunSpec, load_toml
from mlharness.tasks import TaskOptions, create_task

OFFICIAL_CONF = {  # a few lines of loadgen/mlperf.conf, to keep these tests independent of it
    "resnet50.*.performance_sample_count_override": "1024",
    "*.Offline.min_duration": "600000", "*.Server.min_duration": "600000",
    "resnet50.Offline.min_query_count": "24576", "*.Offline.target_qps": "1.0",
    "*.Server.target_latency": "10", "resnet50.Server.target_latency": "15",
}


# ---- RunSpec values ---------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,message", [
    ({"target_qps": math.nan}, "finite"),
    ({"target_qps": math.inf}, "finite"),
    ({"stall_timeout": math.nan}, "finite"),
    ({"stall_timeout": 0}, "must be > 0"),
    ({"min_duration": -5}, "must be >= 0"),
    ({"scenario": "Server", "target_qps": 1e9}, "above"),
    ({"scenario": "SingleStream", "batch_size": 4}, "does not apply to SingleStream"),
    ({"valid": "no"}, "valid"),
    ({"workers": True}, "workers"),
    ({"target_qps": "5"}, "target_qps"),
    ({"min_query_count": 10, "max_query_count": 5}, "below"),
    ({"set": 5}, "table"),
])
def test_bad_values_are_refused_by_name(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        RunSpec(benchmark="demo", **kwargs)
    assert info.value.hint


def test_old_setting_names_point_at_the_new_one() -> None:
    with pytest.raises(ConfigError, match="'short' was renamed to 'valid'"):
        RunSpec(benchmark="demo", short=False)
    with pytest.raises(ConfigError, match="renamed to 'target_latency'"):
        RunSpec(benchmark="demo", scenario="SingleStream", target_latency_ms=1)


def test_toml_keys_are_the_flag_names(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text('benchmark = "demo"\nscenario = "Server"\ntarget_qps = 20\nvalid = true\n'
                    'server_latency = 50\nstall_timeout = 30\ntrace = true\n'
                    '[set]\nmax_async_queries = 1\n[backend_option]\ngraph_optimization = "basic"\n')
    spec = RunSpec.from_mapping(load_toml(path))
    assert (spec.valid, spec.server_latency, spec.stall_timeout, spec.trace) == (True, 50, 30, True)
    assert spec.set == {"max_async_queries": 1}
    path.write_text('benchmark = "demo"\nshort = "no"\n')
    with pytest.raises(ConfigError, match="renamed"):
        RunSpec.from_mapping(load_toml(path))
    path.write_text('benchmark = "demo"\nvalid = "no"\n')
    with pytest.raises(ConfigError, match="valid"):
        RunSpec.from_mapping(load_toml(path))


# ---- --set ------------------------------------------------------------------------------------

def test_the_user_conf_keys_flags_write_are_declared_once_on_their_flags() -> None:
    """``Flag(user_conf=...)`` is the one list of keys a flag owns: `--set` refuses each with
    its flags named, and they are the keys the flags write into user.conf."""
    owners = user_conf_owners(RunSpec)
    for key, flags in owners.items():
        with pytest.raises(ConfigError, match="own flag") as info:
            RunSpec(benchmark="demo", set={key: 1})
        assert flags in info.value.hint
    assert owners["target_latency"] == "--target-latency or --server-latency"
    server = RunSpec(benchmark="demo", scenario="Server", target_qps=5.0, server_latency=50.0,
                     min_duration=1000, min_query_count=10, max_query_count=20,
                     performance_sample_count=8)
    single = RunSpec(benchmark="demo", scenario="SingleStream", target_latency=3.0)
    written = {*user_conf_entries(server.test_config("demo")),
               *user_conf_entries(single.test_config("demo"))}
    assert written == set(owners) - {"mode"}  # the mode is LoadGen's TestSettings.mode


def test_set_refuses_flag_keys_unknown_keys_and_text() -> None:
    with pytest.raises(ConfigError, match="own flag") as info:
        RunSpec(benchmark="demo", set={"min_duration": 1000})
    assert "--min-duration" in info.value.hint
    with pytest.raises(ConfigError, match="own flag"):
        RunSpec(benchmark="demo", set={"target_qps": 5})
    with pytest.raises(ConfigError, match="does not read"):
        RunSpec(benchmark="demo", set={"unknownkey": 1})
    with pytest.raises(ConfigError, match="only numbers"):
        RunSpec(benchmark="demo", set={"max_async_queries": "many"})
    with pytest.raises(ConfigError, match="finite"):
        RunSpec(benchmark="demo", set={"max_async_queries": math.nan})
    assert RunSpec(benchmark="demo", set={"max_async_queries": "2"}).set == {"max_async_queries": 2}
    assert {"samples_per_query", "accuracy_sample_count_override"} <= USER_CONF_KEYS


def test_cli_refuses_bad_values_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                            ) -> None:
    out = ["--output-dir", str(tmp_path), "--no-progress"]
    for argv, needle in (
        (["--target-qps", "nan"], "finite"),
        (["--stall-timeout", "nan"], "finite"),
        (["--min-duration", "-5"], ">= 0"),
        (["--set", "unknownkey=1"], "unknownkey"),
        (["--set", "min_duration=1000"], "own flag"),
        (["--round", "v9.9"], "unknown round"),
        (["--scenario", "Server", "--target-qps", "1e9"], "above"),
        (["--task-option", "labl_offset=0"], "labl_offset"),
        (["--backend-option", "graph_optimisation=basic"], "graph_optimisation"),
    ):
        assert main(["run", "-b", "demo", *argv, *out]) == 2, argv
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err, (argv, err)
    assert not any(tmp_path.iterdir())  # refused before a run directory was made


# ---- task and backend options ------------------------------------------------------------------

def test_task_options_are_checked_by_the_task(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown task option: labl_offset") as info:
        create_task("resnet50", TaskOptions(dataset=tmp_path, extra={"labl_offset": 0}))
    assert "label_offset" in info.value.hint
    with pytest.raises(ConfigError, match="sequence_length"):
        create_task("bert-99", TaskOptions(dataset=tmp_path, extra={"sequence_length": "long"}))
    with pytest.raises(ConfigError, match="unknown task option"):
        create_task("demo", TaskOptions(extra={"preprocessing": "x"}))


def test_backend_options_are_checked_by_the_backend() -> None:
    assert backend_options(OnnxRuntimeBackend, {}) == OnnxRuntimeOptions()
    with pytest.raises(ConfigError, match="unknown onnxruntime backend option: threads"):
        backend_options(OnnxRuntimeBackend, {"threads": 2})
    with pytest.raises(ConfigError, match="graph_optimization"):
        backend_options(OnnxRuntimeBackend, {"graph_optimization": "max"})

    class Own:  # a backend of your own without an options model gets the table as given
        name = "own"
    assert backend_options(Own, {"x": 1}).model_dump() == {"x": 1}


def test_a_backend_reads_its_options_typed() -> None:
    """``BackendOptions.extra`` is the backend's own model; a subclass of a built-in backend
    without one gets the free table, and the built-in code reads the keys it knows, checked."""

    class Mine(OnnxRuntimeBackend):
        name = "mine"

    extra = backend_options(Mine, {"graph_optimization": "basic", "delay_ms": 3})
    assert isinstance(extra, FreeOptions) and extra.delay_ms == 3  # type: ignore[attr-defined]
    options = BackendOptions(extra=extra)
    assert options.extra_as(OnnxRuntimeOptions) == OnnxRuntimeOptions(graph_optimization="basic")
    with pytest.raises(ConfigError, match="graph_optimization"):
        BackendOptions(extra={"graph_optimization": "max"}).extra_as(OnnxRuntimeOptions)
    typed = backend_options(OnnxRuntimeBackend, {"graph_optimization": "basic"})
    assert BackendOptions(extra=typed).extra_as(OnnxRuntimeOptions) is typed


def test_openvino_and_pytorch_options_are_typed() -> None:
    from mlharness.backends.openvino import OpenVinoBackend
    from mlharness.backends.pytorch import PyTorchBackend

    assert backend_options(OpenVinoBackend,
                           {"performance_hint": "latency", "num_streams": 2}).model_dump() == {
        "performance_hint": "LATENCY", "num_streams": "2", "pin_threads": None,
        "unquantised": None, "snippets": None}
    with pytest.raises(ConfigError, match="unquantised"):
        backend_options(OpenVinoBackend, {"unquantised": "int4"})
    with pytest.raises(ConfigError, match="unknown performance_hint 'FAST'"):
        backend_options(OpenVinoBackend, {"performance_hint": "fast"})
    with pytest.raises(ConfigError, match="unknown openvino backend option: scenario"):
        backend_options(OpenVinoBackend, {"scenario": "Offline"})  # the harness's, not the user's
    with pytest.raises(ConfigError, match="unknown arch 'gpt'"):
        backend_options(PyTorchBackend, {"arch": "gpt"})
    with pytest.raises(ConfigError, match="valid keys: arch, compile, config"):
        backend_options(PyTorchBackend, {"label_offset": 0})  # a task option


def test_distribution_is_a_typed_section_and_the_backend_a_runtime() -> None:
    """Nodes and Ray actors are where samples run, not a backend: their options are the
    ``distribution`` section, typed, and each is refused where it does not apply."""
    remote = RunSpec(benchmark="demo", distribution={"endpoints": "http://a:1,http://b:2"})
    assert remote.distribution.kind == "remote" and remote.backend == "onnxruntime"
    assert remote.distribution.endpoints == ["http://a:1", "http://b:2"]
    ray = RunSpec(benchmark="demo", backend="noop", distribution={"replicas": 2})
    assert (ray.distribution.kind, ray.distribution.replicas, ray.backend) == ("ray", 2, "noop")
    with pytest.raises(ConfigError, match="replicas must be >= 1, got 0"):
        RunSpec(benchmark="demo", distribution={"kind": "ray", "replicas": 0})
    with pytest.raises(ConfigError, match="--replicas applies to a ray run, not a remote one"):
        RunSpec(benchmark="demo", distribution={"endpoints": ["http://a:1"], "replicas": 2})
    with pytest.raises(ConfigError, match="--failover applies to a remote or ray run"):
        RunSpec(benchmark="demo", distribution={"failover": True})
    with pytest.raises(ConfigError, match="needs at least one --endpoint"):
        RunSpec(benchmark="demo", distribution={"kind": "remote"})
    # earlier TOML files and run records: --backend remote|ray with their backend options
    old = RunSpec(benchmark="demo", backend="ray",
                  backend_option={"replicas": 2, "replica_backend": "noop",
                                  "request_timeout_s": 5, "graph_optimization": "basic"})
    assert (old.backend, old.backend_option) == ("noop", {"graph_optimization": "basic"})
    assert (old.distribution.kind, old.distribution.replicas,
            old.distribution.request_timeout) == ("ray", 2, 5.0)
    assert RunSpec.model_validate(old.to_dict()) == old  # a record reads back the same
    assert command_words(Distribution, old.distribution.model_dump(mode="json")) == [
        "--distribute", "ray", "--request-timeout", "5", "--replicas", "2"]


# ---- effective settings ---------------------------------------------------------------------

def test_effective_settings_precedence_and_sources() -> None:
    spec = RunSpec(benchmark="resnet50", scenario="Offline", target_qps=100)
    eff = spec.settings("resnet50", sut={"target_qps": 5, "max_async_queries": 2},
                        conf=OFFICIAL_CONF)
    assert (eff.values["target_qps"], eff.sources["target_qps"]) == (100, "flag")
    assert (eff.values["max_async_queries"], eff.sources["max_async_queries"]) == (2, "sut-config")
    assert (eff.values["min_duration"], eff.sources["min_duration"]) == (2000, "test-run")
    assert eff.sources["performance_sample_count_override"] == "mlperf.conf"
    assert eff.sources["max_duration"] == "loadgen-default"
    assert "resnet50.Offline.target_qps = 100" in eff.render_user_conf()
    assert "performance_sample_count_override" not in eff.user_conf  # mlperf.conf's own
    valid = RunSpec(benchmark="resnet50", scenario="Offline", valid=True).settings(
        "resnet50", conf=OFFICIAL_CONF)
    assert valid.values["min_duration"] == 600000 and valid.sources["min_duration"] == "mlperf.conf"
    assert valid.samples_per_query == 24576  # max(min_query_count, 1.1 x 600 s x 1 QPS)


def test_preflight_reads_the_same_decision() -> None:
    v61 = rules.load("v6.1")
    seeds = lambda: dict(v61.seeds)  # noqa: E731
    spec = RunSpec(benchmark="resnet50", scenario="Server", valid=True,
                   set={"max_async_queries": 1})
    assert rules.preflight(spec, v61, seeds=seeds) == []
    capped = RunSpec(benchmark="resnet50", valid=True, set={"accuracy_sample_count_override": 10},
                     mode="accuracy")
    assert [p.code for p in rules.preflight(capped, v61, seeds=seeds)] == ["accuracy-coverage"]


def test_batch_above_the_models_fixed_batch_is_refused_before_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("ReduceMax", ["image"], ["score"], axes=[1, 2, 3], keepdims=0),
         helper.make_node("Cast", ["score"], ["label"], to=TensorProto.INT64)], "fixed",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [2, 1, 8, 8])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, [2])])
    model = tmp_path / "fixed.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
    code = main(["run", "-b", "demo", "-m", str(model), "-s", "Offline", "--batch-size", "8",
                 "--output-dir", str(tmp_path / "runs"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "fixed batch of 2" in err, err


# ---- run record -------------------------------------------------------------------------------

def test_run_record_round_trips_and_checks_its_format(tmp_path: Path) -> None:
    rec = RunRecord(benchmark="demo", spec=RunSpec(benchmark="demo", scenario="Server",
                                                   target_qps=3, set={"max_async_queries": 1}),
                    status="ok", purpose="probe",
                    result=LoadGenResult("Server", "performance", True, "result_completed_"
                                         "samples_per_sec", "completed samples/s", 3.0))
    rec.save(tmp_path)
    again = RunRecord.load(tmp_path)
    assert again == rec and again.format == RUN_FORMAT and again.purpose == "probe"
    assert again.verdict() == ("VALID", "") and again.exit_code == 0

    data = json.loads((tmp_path / "run.json").read_text())
    data["format"] = "mlharness-run/99"
    (tmp_path / "run.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="mlharness-run/99"):
        RunRecord.load(tmp_path)
    (tmp_path / "run.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="not an object"):
        RunRecord.load(tmp_path)
    with pytest.raises(ConfigError, match="no run.json"):
        RunRecord.load(tmp_path / "missing")
    # the result is typed: a wrong-typed value names the field instead of failing downstream
    data["format"] = RUN_FORMAT
    data["result"]["value"] = "fast"
    (tmp_path / "run.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="result.value"):
        RunRecord.load(tmp_path)


def test_version_1_records_are_migrated(tmp_path: Path) -> None:
    old = {"format": "mlharness-run/1", "status": "failed", "benchmark": "demo",
           "error": {"message": "stalled"},
           "spec": {"benchmark": "demo", "scenario": "SingleStream", "short": False,
                    "target_latency_ms": 0.5, "stall_timeout_s": 60.0, "enable_trace": False,
                    "user_conf_extra": {}, "backend_options": {"delay_ms": 1}}}
    (tmp_path / "run.json").write_text(json.dumps(old))
    rec = RunRecord.load(tmp_path)
    assert rec.spec.valid is True and rec.spec.target_latency == 0.5
    assert rec.spec.backend_option == {"delay_ms": 1}
    assert rec.verdict() == ("FAILED", "stalled") and rec.exit_code == 3


def test_auto_target_means_the_same_in_toml_and_flags(tmp_path: Path) -> None:
    from mlharness.cli.main import build_parser
    from mlharness.cli.run import spec_from_args

    cfg = tmp_path / "run.toml"
    cfg.write_text('benchmark = "demo"\nscenario = "Offline"\ntarget_qps = "auto"\n')
    toml, flags = (spec_from_args(build_parser().parse_args(["run", *argv])) for argv in (
        ["--config", str(cfg)], ["-b", "demo", "-s", "Offline", "--target-qps", "auto"]))
    assert toml == flags and toml.target_qps == "auto"
    # measured first, end to end (a target with a wide margin: VALID on any machine); the same
    # from flags: tests/test_e2e_demo.py
    runs = tmp_path / "runs"
    assert main(["run", "--config", str(cfg), "--output-dir", str(runs), "--no-progress"]) == 0
    [run] = (runs / "demo").iterdir()
    assert "demo.Offline.target_qps = " in (run / "user.conf").read_text()
    assert list((runs / "_tune" / "demo").iterdir())  # the probes that measured it


def test_unknown_device_is_refused_not_run_on_the_cpu(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "-b", "demo", "--mode", "accuracy", "--max-samples", "10", "--device",
                 "gpu", "--output-dir", str(tmp_path), "--no-progress"])
    assert code == 2 and "unknown device 'gpu'" in capsys.readouterr().err
