"""Round rule tables: loader, values, accuracy patterns, retired names, and the official constants."""

from __future__ import annotations

import sys

import pytest

import referee
from mlharness import rules
from mlharness.errors import ConfigError
from mlharness.loadgen import installed

OFFICIAL = referee.INFERENCE / "tools" / "submission"


def test_every_round_loads():
    for name in rules.ROUNDS:
        r = rules.load(name)
        assert r.round == name and r.checker_version == name
        assert set(r.seeds) == {"qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed"}
        assert r.min_duration_ms == 600000
        assert "TEST05" in r.retired_tests
    assert rules.load() is rules.load("v6.1")
    assert rules.load("6.1") is rules.load("v6.1")


def test_unknown_round():
    with pytest.raises(ConfigError):
        rules.load("v4.0")


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
    assert r.benchmark("resnet").parse_accuracy("accuracy=76.456%, good=38228, total=50000\n") == 76.456
    bert = '{"exact_match": 83.6, "f1": 90.874}\nhash=abc\n'
    assert r.benchmark("bert-99").parse_accuracy(bert) == 90.874
    assert rules.load("v6.0").benchmark("retinanet").parse_accuracy("mAP=37.552%\n") == 37.552
    assert r.benchmark("resnet").parse_accuracy("top1 is 76") is None


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
        r, cfg = rules.load(name), c.MODEL_CONFIG[name]
        assert r.seeds == cfg["seeds"]
        for bench in r.benchmarks.values():
            n = bench.name
            assert n in cfg["models"]
            assert bench.dataset_size == cfg["dataset-size"][n]
            assert bench.performance_sample_count == cfg["performance-sample-count"][n]
            metric, target = cfg["accuracy-target"][n]
            assert (bench.accuracy_metric, bench.accuracy_target) == (metric, pytest.approx(target))
            assert bench.accuracy_regex == c.ACC_PATTERN[metric]
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
