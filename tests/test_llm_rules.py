"""Round facts of the v6.1 benchmarks (rules/v6.1.toml), the LLMs' above all: loader, helpers,
and every value against the official constants.py and mlperf.conf."""

from __future__ import annotations

import re
import sys

import pytest
import referee

from mlharness.errors import ConfigError
from mlharness import rules

OFFICIAL = referee.INFERENCE / "tools" / "submission"
# the generation benchmarks: the LLMs, and whisper (its decoder generates the transcript)
NAMES = ("llama3.1-8b", "llama3.1-8b-edge", "llama2-70b-99.9", "llama2-70b-99", "deepseek-r1",
         "gpt-oss-120b", "whisper", "qwen3-vl-235b-a22b")


def _llms(r: rules.Rules) -> dict[str, rules.BenchmarkRules]:
    return {n: b for n, b in {**r.benchmarks, **r.kept}.items() if b.generates}


def test_loads_and_helpers():
    r = rules.load("v6.1")
    assert rules.load("6.1") is r and set(_llms(r)) == set(NAMES)
    b = r.benchmark("llama3.1-8b")
    assert b.token_limit("Interactive").ttft_ns == 500_000_000
    assert b.token_limit("Server").passes(1.9e9, 99e6)
    assert not b.token_limit("Server").passes(2e9, 1e6)  # strictly below, as the checker
    assert b.token_limit("Offline") is None
    assert b.loadgen_model_for("Interactive") == "llama3_1-8b-interactive"
    assert b.loadgen_model_for("Offline") == "llama3_1-8b"
    with pytest.raises(ConfigError, match="no Interactive"):
        r.benchmark("llama3.1-8b-edge").loadgen_model_for("Interactive")
    assert r.benchmark("gpt-oss-120b").accuracy_count == 4395
    assert r.benchmark("deepseek-r1").accuracy_count == 4388
    assert r.benchmark("llama3.1-8b-edge").scenarios_for("edge") == ("SingleStream", "Offline")


def test_accuracy_lines_and_bounds():
    b = rules.load("v6.1").benchmark("llama3.1-8b")
    line = ("{'rouge1': '38.9001', 'rouge2': '16.0001', 'rougeL': '24.6', 'rougeLsum': '35.9', "
            "'gen_len': 8000000, 'gen_num': 13368}")
    values = b.parse_accuracy(line)
    assert values == {"ROUGE1": 38.9001, "ROUGE2": 16.0001, "ROUGEL": 24.6, "ROUGELSUM": 35.9,
                      "GEN_LEN": 8000000.0}
    assert b.accuracy_failures(values) == []
    too_long = dict(values, GEN_LEN=9_000_000.0)
    assert b.accuracy_failures(too_long) == ["GEN_LEN 9e+06 above 8.98441e+06 (1.1 x 8.16764e+06)"]
    low = dict(values, ROUGE1=30.0)
    assert b.accuracy_failures(low)[0].startswith("ROUGE1 30 below")
    assert b.accuracy_failures({})[0] == "ROUGE1 missing"
    # an upper limit binds only a reported value (gpt-oss-120b's script prints no length)
    oss = rules.load("v6.1").benchmark("gpt-oss-120b")
    assert oss.accuracy_failures({"exact_match": 83.0}) == []
    assert oss.accuracy_failures({"exact_match": 83.0, "TOKENS_PER_SAMPLE": 11000.0}) == [
        "TOKENS_PER_SAMPLE 11000 above 10998.9 (1.1 x 9999)"]


def test_out_of_round_and_unknown():
    r = rules.load("v6.1")
    with pytest.raises(ConfigError, match="retired in v6.1") as e:
        r.benchmark("llama2-70b-99")
    assert "llama2-70b-99.9" in e.value.hint
    assert r.find_kept("llama2-70b-99").accuracy[0].fraction == 0.99
    assert not r.benchmark("resnet").generates and r.benchmark("llama3.1-8b").generates
    with pytest.raises(ConfigError, match="unknown round"):
        rules.load("v5.2")
    with pytest.raises(ConfigError, match="not a v4.1 benchmark"):
        rules.rules_for("llama3.1-8b", "v4.1")


def _mlperf_conf() -> dict[str, int]:
    out = {}
    for line in (referee.INFERENCE / "loadgen" / "mlperf.conf").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "=" in line:
            key, value = (p.strip() for p in line.split("=", 1))
            out[key] = int(value) if re.fullmatch(r"-?\d+", value) else value
    return out


@referee.official("loadgen/mlperf.conf")
def test_mlperf_conf_keys_are_the_official_ones_and_all_of_them():
    conf = _mlperf_conf()
    for b in _llms(rules.load("v6.1")).values():
        assert b.mlperf_conf, b.name
        for key, value in b.mlperf_conf.items():
            assert conf[key] == value, key
        models = {b.loadgen_model, b.interactive_loadgen_model} - {None}
        official = {k: v for k, v in conf.items() if k.split(".")[0] in models}
        assert official == b.mlperf_conf, b.name


@referee.official("tools/submission/submission_checker/constants.py")
def test_values_equal_the_official_constants():
    sys.path.insert(0, str(OFFICIAL))
    try:
        from submission_checker import constants as c  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(OFFICIAL))
    r = rules.load("v6.1")
    for b in {**r.benchmarks, **r.kept}.values():  # every benchmark of the round, any kind
        cfg = c.MODEL_CONFIG["v6.1" if b.in_round else "v6.0"]
        n = b.name
        assert (n in c.MODEL_CONFIG["v6.1"]["models"]) == b.in_round
        assert b.dataset_size == cfg["dataset-size"][n]
        assert b.performance_sample_count == cfg["performance-sample-count"][n]
        assert b.offline_min_samples_per_query == c.OFFLINE_MIN_SPQ_SINCE_V4[n]
        count = cfg.get("accuracy-sample-count", {}).get(n)
        if isinstance(count, dict):  # qwen3-vl: per scenario
            assert b.accuracy_sample_count is None
            assert b.accuracy_sample_count_by_scenario == count
        else:
            assert b.accuracy_sample_count == count
        assert b.min_queries == cfg["min-queries"][n]
        latency = cfg["latency-constraint"].get(n, {})
        assert b.server_latency_ns == latency.get("Server")
        if b.generates and not b.uses_token_latencies:  # judged on the end-to-end latency
            assert b.latency_ns == latency
            # Interactive, without an mlperf.conf key of its own: its bound (ms) and its set
            assert b.user_conf == {"Interactive": {
                "target_latency": latency["Interactive"] / 1e6,
                "performance_sample_count_override": count["Interactive"]}}
        targets = cfg["accuracy-target"][n]
        for scenario in ("Offline", "Server", "Interactive"):
            flat = targets.get(scenario, targets) if isinstance(targets, dict) else targets
            pairs = list(zip(flat[::2], flat[1::2]))
            assert [(a.metric, pytest.approx(a.value)) for a in b.accuracy_for(scenario)] == pairs
        upper = cfg["accuracy-upper-limit"].get(n, ())
        assert [(a.metric, pytest.approx(a.value)) for a in b.accuracy_upper] == \
            list(zip(upper[::2], upper[1::2]))
        for a in b.accuracy + b.accuracy_upper:
            assert b.accuracy_regex[a.metric] == c.ACC_PATTERN[a.metric]
        for suite, key in (("edge", "edge"), ("datacenter", "datacenter"),
                           ("datacenter,edge", "datacenter-edge")):
            req = cfg[f"required-scenarios-{key}"].get(n)
            assert b.scenarios_for(suite) == (tuple(req) if req else None), (n, suite)
            opt = cfg[f"optional-scenarios-{key}"].get(n)
            assert b.optional_scenarios.get(suite) == (tuple(opt) if opt else None), (n, suite)
        tests = tuple(t for t in ("TEST01", "TEST04", "TEST06", "TEST07", "TEST08", "TEST09")
                      if n in cfg[f"models_{t}"])
        assert b.compliance_tests == tests, n
        limits = c.LLM_LATENCY_LIMITS.get(n, {})
        assert {s: (t.ttft_ns, t.tpot_ns) for s, t in b.token_latency_ns.items()} == \
            {s: (v["ttft"], v["tpot"]) for s, v in limits.items()}
        assert b.result_fields == c.RESULT_FIELD_BENCHMARK_OVERWRITE["v6.1"].get(n, {})
        # judged on tokens exactly when the checker's llm_check applies to it, or (whisper, in
        # Offline only: no latency limits) when mlperf.conf sets use_token_latencies = 1
        assert b.uses_token_latencies == (n in c.LLM_LATENCY_LIMITS
                                          or n in ("llama3.1-8b-edge", "whisper"))
    # each benchmark the v6.1 checker treats as an LLM in the round is here
    for n in c.MODEL_CONFIG["v6.1"]["models"]:
        if n in c.LLM_LATENCY_LIMITS or n == "llama3.1-8b-edge":
            assert r.benchmark(n).in_round
