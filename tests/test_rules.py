"""Round rule tables: loader, values, accuracy patterns, retired names, and the official constants."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

import referee
from mlharness import rules
from mlharness.errors import ConfigError
from mlharness.loadgen import installed

OFFICIAL = referee.INFERENCE / "tools" / "submission"
#: rounds whose rules come from their own checker under rounds/<round>/ (before v5.0)
OLD_ROUNDS = tuple(n for n in rules.ROUNDS if rules.load(n).checker_script)


def test_every_round_loads():
    for name in rules.ROUNDS:
        r = rules.load(name)
        assert r.round == name and r.checker_version == name
        assert set(r.seeds) == {"qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed"}
        assert r.min_duration_ms == 600000
        assert ("TEST05" in r.retired_tests) == (name not in OLD_ROUNDS)
        assert bool(r.test05_seeds) == (name in OLD_ROUNDS)
    assert OLD_ROUNDS == ("v4.1", "v4.0", "v3.1", "v3.0", "v2.1")
    assert rules.load("v3.0").benchmark("resnet50").compliance_tests == ("TEST01", "TEST04", "TEST05")
    assert rules.load() is rules.load("v6.1")
    assert rules.load("6.1") is rules.load("v6.1")


def test_unknown_round():
    with pytest.raises(ConfigError):
        rules.load("v4.2")


def test_v61_seeds_are_the_installed_loadgen_seeds():
    assert installed.installed_seeds() == rules.load("v6.1").seeds
    assert rules.round_for_seeds(rules.load("v6.0").seeds) == "v6.0"
    assert rules.round_for_seeds({"qsl_rng_seed": 1}) is None


def test_benchmark_names_and_values():
    r = rules.load("v6.1")
    resnet = r.benchmark("resnet50")
    assert resnet is r.benchmark("resnet")
    assert (resnet.name, resnet.loadgen_model, resnet.dataset_size) == ("resnet", "resnet50", 50000)
    assert resnet.performance_sample_count == 1024
    assert resnet.offline_min_samples_per_query == 24576
    assert resnet.server_latency_ns == 15_000_000
    assert resnet.compliance_tests == ("TEST01", "TEST04")
    assert resnet.accuracy_target == pytest.approx(75.6954)
    assert r.benchmark("bert-99").accuracy_target == pytest.approx(89.96526)
    assert r.benchmark("bert-99.9").accuracy_target == pytest.approx(90.783126)
    assert r.benchmark("bert-99.9").accuracy_delta_percent == 0.1
    assert resnet.accuracy_delta_percent == 1.0
    assert r.benchmark("bert-99").compliance_tests == ("TEST01",)
    assert r.benchmark("bert-99").loadgen_model == "bert"
    assert rules.load("v6.0").benchmark("retinanet").dataset_size == 24781


def test_required_scenarios_per_system_type():
    r = rules.load("v6.1")
    resnet = r.benchmark("resnet")
    assert resnet.scenarios_for("edge") == ("SingleStream", "MultiStream", "Offline")
    assert resnet.scenarios_for("edge,datacenter") == resnet.scenarios_for("datacenter,edge")
    assert "Server" in resnet.scenarios_for("datacenter,edge")
    assert resnet.scenarios_for("datacenter") is None  # v6.1 lists none: the checker crashes
    assert r.benchmark("bert-99").scenarios_for("edge") == ("SingleStream", "Offline")
    assert rules.load("v5.1").benchmark("retinanet").scenarios_for("datacenter") == ("Server", "Offline")


def test_retired_and_foreign_benchmarks_explain_themselves():
    with pytest.raises(ConfigError, match="retired in v6.1"):
        rules.load("v6.1").benchmark("retinanet")
    with pytest.raises(ConfigError, match="not an MLPerf benchmark"):
        rules.load("v6.1").benchmark("demo")
    with pytest.raises(ConfigError, match="not a v6.1 benchmark"):
        rules.load("v6.1").benchmark("gpt-5")
    assert rules.load("v6.0").find("retinanet") is not None


def test_accuracy_patterns_read_official_lines():
    r = rules.load("v6.1")
    assert r.benchmark("resnet").accuracy_value("accuracy=76.456%, good=38228, total=50000\n") == 76.456
    bert = '{"exact_match": 83.6, "f1": 90.874}\nhash=abc\n'
    assert r.benchmark("bert-99").accuracy_value(bert) == 90.874
    assert rules.load("v6.0").benchmark("retinanet").accuracy_value("mAP=37.552%\n") == 37.552
    assert r.benchmark("resnet").accuracy_value("top1 is 76") is None


def test_system_and_measurement_fields():
    r = rules.load()
    assert len(r.system_required) == 35 and "accelerator_on-chip_memories" in r.system_required
    assert set(r.system_meaningful) <= set(r.system_required)
    assert r.measurements_files == ("user.conf", "README.md")
    assert "weight_transformations" in r.measurements_required


@referee.official("tools/submission/submission_checker/constants.py")
def test_tables_equal_the_official_constants():
    sys.path.insert(0, str(OFFICIAL))
    try:
        from submission_checker import constants as c  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(OFFICIAL))
    for name in rules.ROUNDS:
        if name in OLD_ROUNDS:
            continue  # test_old_rounds_equal_their_own_files
        r, cfg = rules.load(name), c.MODEL_CONFIG[name]
        assert r.seeds == cfg["seeds"]
        for bench in r.benchmarks.values():
            if bench.generates:
                continue  # the LLMs: every metric and limit in test_llm_rules.py
            n = bench.name
            assert n in cfg["models"]
            assert bench.dataset_size == cfg["dataset-size"][n]
            assert bench.performance_sample_count == cfg["performance-sample-count"][n]
            metric, target = cfg["accuracy-target"][n]
            assert (bench.accuracy_metric, bench.accuracy_target) == (metric, pytest.approx(target))
            assert bench.accuracy_regex[metric] == c.ACC_PATTERN[metric]
            assert bench.min_queries == cfg["min-queries"][n]
            assert bench.offline_min_samples_per_query == c.OFFLINE_MIN_SPQ_SINCE_V4[n]
            assert bench.server_latency_ns == cfg["latency-constraint"].get(n, {}).get("Server")
            for suite, key in (("edge", "edge"), ("datacenter", "datacenter"),
                               ("datacenter,edge", "datacenter-edge")):
                official = cfg[f"required-scenarios-{key}"].get(n)
                assert bench.scenarios_for(suite) == (tuple(official) if official else None)
            tests = tuple(t for t in ("TEST01", "TEST04") if n in cfg[f"models_{t}"])
            assert bench.compliance_tests == tests
        for retired in r.retired_benchmarks:
            assert retired not in cfg["models"]
        assert "retinanet" in cfg["models"] or "retinanet" in r.retired_benchmarks
    r = rules.load()
    assert list(r.system_required) == c.SYSTEM_DESC_REQUIRED_FIELDS
    assert list(r.system_meaningful) == c.SYSTEM_DESC_MEANINGFUL_RESPONSE_REQUIRED_FIELDS
    assert list(r.system_network) == c.SYSTEM_DESC_REQUIRED_FIELDS_NETWORK_MODE
    assert list(r.measurements_required) == c.SYSTEM_IMP_REQUIRED_FILES
    assert list(r.measurements_files) == c.REQUIRED_MEASURE_FILES
    assert r.max_accuracy_log_bytes == c.MAX_ACCURACY_LOG_SIZE
    assert r.min_duration_ms == c.TEST_DURATION_MS
    assert list(r.statuses) == c.VALID_AVAILABILITIES
    assert list(r.divisions) == sorted(c.VALID_DIVISIONS, key=["closed", "open", "network"].index)


def _round_checker(name: str) -> ModuleType:
    """The round's own submission checker, imported from its folder (it is standard library only)."""
    r = rules.load(name)
    base = referee.round_dir(name, r.checker_script, "mlperf.conf")
    folder = (base / r.checker_script).parent
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location(f"checker_{name.replace('.', '_')}",
                                                      base / r.checker_script)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("log_parser", None)  # each round has its own
    return module


def _round_conf(name: str) -> tuple[dict[str, str], dict[str, int]]:
    """The round's mlperf.conf: lines for the models mlharness runs (seeds aside), and seeds."""
    lines, seeds = {}, {}
    for raw in (referee.round_dir(name) / "mlperf.conf").read_text().splitlines():
        line = raw.split("#")[0].strip()
        if "=" not in line:
            continue
        key, value = (x.strip() for x in line.split("=", 1))
        model, _, setting = key.split(".")
        if setting.endswith("rng_seed"):
            seeds[setting] = int(value)
        elif model in ("*", "resnet50", "retinanet", "bert"):
            lines[key] = value
    return lines, seeds


@pytest.mark.parametrize("name", OLD_ROUNDS)
def test_old_rounds_equal_their_own_files(name: str):
    """Each value of rules/<round>.toml against that round's checker, compliance lists and
    mlperf.conf (../shared/official/rounds/<round>/)."""
    c, r = _round_checker(name), rules.load(name)
    cfg = c.MODEL_CONFIG[name]
    assert r.seeds == cfg["seeds"] and r.test05_seeds == cfg["test05_seeds"]
    lines, seeds = _round_conf(name)
    assert r.mlperf_conf == lines
    assert {k: v for k, v in seeds.items() if not k.startswith("test05")} == r.seeds
    if any(k.startswith("test05") for k in seeds):  # v2.1's mlperf.conf has none
        assert {k[len("test05_"):]: v for k, v in seeds.items() if k.startswith("test05")} \
            == r.test05_seeds
    assert list(r.measurements_files) == c.REQUIRED_MEASURE_FILES
    assert r.max_accuracy_log_bytes == c.MAX_ACCURACY_LOG_SIZE
    assert r.min_duration_ms == c.TEST_DURATION_MS
    since_v4 = getattr(c, "OFFLINE_MIN_SPQ_SINCE_V4", None)
    compliance_src = (referee.round_dir(name) / r.checker_script).read_text()
    for bench in r.benchmarks.values():
        n = bench.name
        assert n in cfg["models"]
        assert bench.performance_sample_count == cfg["performance-sample-count"][n]
        metric, target = cfg["accuracy-target"][n]
        assert (bench.accuracy_metric, bench.accuracy_target) == (metric, pytest.approx(target))
        assert bench.min_queries == cfg["min-queries"][n]
        assert bench.server_latency_ns == cfg["latency-constraint"].get(n, {}).get("Server")
        spq = since_v4[n] if since_v4 and name >= "v4.0" else c.OFFLINE_MIN_SPQ
        assert bench.offline_min_samples_per_query == spq
        for suite, key in (("edge", "edge"), ("datacenter", "datacenter"),
                           ("datacenter,edge", "datacenter-edge")):
            official = cfg[f"required-scenarios-{key}"].get(n)
            assert bench.scenarios_for(suite) == (tuple(official) if official else None)
        # check_compliance_dir: TEST01/TEST04/TEST05, TEST04 removed for every model but resnet
        assert bench.compliance_tests == (("TEST01", "TEST04", "TEST05") if n == "resnet"
                                          else ("TEST01", "TEST05"))
        assert f'"{n}"' in compliance_src.split("def check_compliance_dir")[1][:1500] \
            or n == "resnet"
    for retired in r.retired_benchmarks:
        assert retired not in cfg["models"]
