"""Each run setting is declared once, on its RunSpec field (issue 33): the argparse flags of
`run`, `tune` and `compliance`, the TOML key, the default in --help and the reproduce command all
come from that one declaration."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import pytest

from mlharness.cli.main import build_parser
from mlharness.cli.run import add_run_arguments, spec_from_args
from mlharness.cli.spec_flags import run_settings
from mlharness.distribution import Distribution
from mlharness.flags import as_text, flag_of, plain_default
from mlharness.spec import RunSpec, load_toml
from mlharness.store.row import reproduce_command

#: RunSpec fields mlharness sets itself: no flag, no TOML key a person writes
INTERNAL = {"audit_config", "label", "purpose", "sut_conf", "measured"}
#: flags of the run commands that are no setting
NOT_SETTINGS = {"--config", "--replica-backend"}
#: the documented names that are not the TOML key with dashes (docs/configuration.md)
RENAMED_FLAGS = {"length_sort": "--no-length-sort", "kind": "--distribute",
                 "endpoints": "--endpoint"}


def _run_parser() -> argparse.ArgumentParser:
    sub = build_parser()._subparsers._group_actions[0]  # type: ignore[union-attr]
    return sub.choices["run"]


def _settings_fields() -> set[str]:
    """Every field a person sets: RunSpec's (but its sections and internal ones) and the
    distribution section's."""
    own = {n for n, info in RunSpec.model_fields.items()
           if n not in INTERNAL and n != "distribution"}
    return own | set(Distribution.model_fields)


def test_every_setting_has_one_flag_and_every_run_flag_is_a_setting() -> None:
    assert set(run_settings()) == _settings_fields()
    for name in INTERNAL:
        assert flag_of(RunSpec.model_fields[name]) is None, name
    parser = _run_parser()
    by_dest: dict[str, list[argparse.Action]] = {}
    for action in parser._actions:
        by_dest.setdefault(action.dest, []).append(action)
    for name, setting in run_settings().items():
        actions = by_dest.get(name, [])
        expected = 2 if setting.flag.default_flag else 1  # --test beside --valid
        assert len(actions) == expected, (name, [a.option_strings for a in actions])
        assert setting.option in actions[-1].option_strings, name
    # the flags add_run_arguments adds (run, tune and compliance) are the shared settings, plus
    # two that are not settings
    shared = argparse.ArgumentParser(allow_abbrev=False)
    add_run_arguments(shared)
    flags = {a.option_strings[0] for a in shared._actions if a.dest != "help"}
    expected_flags = {s.option for s in run_settings().values() if s.flag.shared}
    expected_flags |= {s.flag.default_flag for s in run_settings().values()
                       if s.flag.shared and s.flag.default_flag}
    assert flags == expected_flags | NOT_SETTINGS
    dests = {a.dest for a in shared._actions} - {"help", "config", "replica_backend"}
    assert dests == {n for n, s in run_settings().items() if s.flag.shared}


@pytest.mark.parametrize("command", ["run", "tune", "compliance"])
def test_the_run_commands_read_each_setting_from_its_one_flag(command: str) -> None:
    from mlharness.cli.tune import NOT_TUNE_SETTINGS

    sub = build_parser()._subparsers._group_actions[0]  # type: ignore[union-attr]
    parser = sub.choices[command]
    wanted = {n for n, s in run_settings().items() if s.flag.shared} | {"round"}
    wanted |= {"mode"} if command == "run" else set()
    wanted -= set(NOT_TUNE_SETTINGS) if command == "tune" else set()
    for name in wanted:
        setting = run_settings()[name]
        [action] = [a for a in parser._actions if setting.option in a.option_strings]
        assert action.dest == name, (command, name, action.dest)
    assert not {a.dest for a in parser._actions} & {"mode"} - wanted  # tune, compliance: perf


def test_the_toml_key_is_the_flag_without_dashes() -> None:
    for name, setting in run_settings().items():
        assert setting.option == RENAMED_FLAGS.get(name, "--" + name.replace("_", "-")), name
    valid = run_settings()["valid"]
    assert (valid.option, valid.flag.default_flag) == ("--valid", "--test")


def test_a_toml_file_and_the_flags_give_the_same_spec(tmp_path: Path) -> None:
    cfg = tmp_path / "run.toml"
    cfg.write_text('[run]\nbenchmark = "demo"\nscenario = "Server"\ntarget_qps = 300\n'
                   'valid = false\nlength_sort = false\nstall_timeout = 30\nworkers = 2\n'
                   '[run.set]\nmax_async_queries = 1\n'
                   '[run.distribution]\nkind = "ray"\nreplicas = 2\n')
    argv = ["-b", "demo", "-s", "Server", "--target-qps", "300", "--test", "--no-length-sort",
            "--stall-timeout", "30", "--workers", "2", "--set", "max_async_queries=1",
            "--distribute", "ray", "--replicas", "2"]
    from_toml = spec_from_args(build_parser().parse_args(["run", "--config", str(cfg)]))
    from_flags = spec_from_args(build_parser().parse_args(["run", *argv]))
    assert from_toml == from_flags
    assert set(load_toml(cfg)) <= set(run_settings()) | {"set", "distribution"}


def test_help_shows_each_default_from_its_field(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name, setting in run_settings().items():
        default = plain_default(setting.info)
        if setting.shape != "value" or default is None:
            continue  # a switch's default is its flag's absence; tables and lists start empty
        assert "{default}" in setting.flag.help, f"{name}: the default is restated by hand"
        shown = " ".join(setting.flag.help_text(setting.info).split())
        assert shown in text and as_text(default) in shown, name
    assert "--test short run: 2 s minimum, small query counts (default)" in text
    assert "(default Offline)" in text and "(default 60)" in text and "(default runs/)" in text


def test_help_follows_a_changed_default(monkeypatch: pytest.MonkeyPatch) -> None:
    setting = run_settings()["stall_timeout"]
    monkeypatch.setattr(setting.info, "default", 90.0)
    assert "(default 90)" in setting.flag.help_text(setting.info)


def test_the_special_flags_keep_their_shapes() -> None:
    parse = build_parser().parse_args
    args = parse(["run", "-b", "demo", "-s", "Server", "-m", "m.onnx", "-d", "data",
                  "--valid", "--no-length-sort", "--target-qps", "auto", "--trace",
                  "--endpoint", "http://a:1", "--endpoint", "http://b:2", "--failover",
                  "--set", "max_async_queries=1", "--task-option", "label_offset=0",
                  "--backend-option", "graph_optimization=basic", "--mode", "accuracy"])
    assert (args.benchmark, args.scenario, args.model, args.dataset) == (
        "demo", "Server", Path("m.onnx"), Path("data"))
    assert (args.valid, args.length_sort, args.target_qps, args.trace) == (True, False, "auto",
                                                                            True)
    assert (args.endpoints, args.failover) == (["http://a:1", "http://b:2"], True)
    assert (args.set, args.task_option, args.backend_option) == (
        [("max_async_queries", "1")], [("label_offset", "0")], [("graph_optimization", "basic")])
    assert parse(["run", "-b", "demo", "--test"]).valid is False
    assert parse(["run", "-b", "demo"]).valid is None  # not given: the TOML or the default
    for wrong in (["--test", "--valid"], ["--mode", "fast"], ["--distribute", "cloud"],
                  ["--target-qps", "fast"], ["--set", "novalue"], ["--workers", "two"]):
        with pytest.raises(SystemExit):
            parse(["run", "-b", "demo", *wrong])
    tune = parse(["tune", "-b", "demo"])  # tune's probes are short performance runs
    assert not hasattr(tune, "valid") and not hasattr(tune, "mode")
    assert parse(["compliance", "-b", "demo", "--reference-perf", "r", "--output", "o",
                  "--test"]).valid is False


REPRODUCED = [
    RunSpec(benchmark="demo", scenario="Server", target_qps=300.5, valid=True, batch_size=4,
            workers=2, threads=1, instances=2, threads_per_instance=1, length_sort=False,
            warmup=0, trace=True, stall_timeout=30, min_duration=1000, min_query_count=10,
            max_query_count=20, performance_sample_count=64, server_latency=50,
            set={"max_async_queries": 1}, task_option={"label_offset": 0},
            backend_option={"graph_optimization": "basic"}, max_samples=100, round="v5.1",
            distribution={"kind": "ray", "replicas": 2, "request_timeout": 5.5,
                          "max_restarts": 1, "replica_cpus": 2, "replica_gpus": 0.5,
                          "failover": True}),
    RunSpec(benchmark="demo", scenario="SingleStream", mode="accuracy", target_latency="auto",
            precision="bf16", device="cpu", backend="noop", model=Path("/m/model.onnx"),
            dataset=Path("/d/data"), vocab=Path("/v/vocab.txt"), cache_dir=Path("/c"),
            distribution={"endpoints": ["http://a:1", "http://b:2"],
                          "token_file": "/t/node.token"}),
]


@pytest.mark.parametrize("spec", REPRODUCED, ids=["ray-and-every-loadgen-key", "remote-paths"])
def test_the_reproduce_command_reads_back_as_the_same_spec(spec: RunSpec) -> None:
    command = reproduce_command(spec.to_dict())
    argv = shlex.split(command)
    assert argv[:2] == ["mlharness", "run"]
    again = spec_from_args(build_parser().parse_args(argv[1:]))
    assert again == spec, command


def test_the_reproduce_command_leaves_defaults_out_but_names_what_a_person_reads_first() -> None:
    command = reproduce_command(RunSpec(benchmark="demo").to_dict())
    assert command == ("mlharness run --benchmark demo --scenario Offline --mode performance "
                       "--test")
