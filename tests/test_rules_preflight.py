"""Preflight: every reason a run cannot count for the round, and silence for a good run."""

from __future__ import annotations

import pytest

from mlharness import rules
from mlharness.errors import ConfigError
from mlharness.spec import RunSpec

V61 = rules.load("v6.1")


def codes(spec: RunSpec, round_rules=V61, **kw) -> list[str]:
    kw.setdefault("seeds", lambda: dict(round_rules.seeds))
    return [p.code for p in rules.preflight(spec, round_rules, **kw)]


def test_good_runs_have_no_problems():
    assert codes(RunSpec(benchmark="resnet50", scenario="Offline", valid=True)) == []
    assert codes(RunSpec(benchmark="bert-99", scenario="SingleStream", valid=True)) == []
    assert codes(RunSpec(benchmark="resnet50", mode="accuracy", valid=True), dataset_size=50000) == []


def test_test_runs_are_refused_for_duration():
    assert codes(RunSpec(benchmark="resnet50", valid=False)) == ["test-duration"]


def test_min_duration_below_rule():
    spec = RunSpec(benchmark="resnet50", valid=True, min_duration=60000)
    assert codes(spec) == ["min-duration"]
    # --set of a key with its own flag is refused before any preflight (issue 9, finding 1)
    with pytest.raises(ConfigError, match="own flag"):
        RunSpec(benchmark="resnet50", valid=True, set={"min_duration": 1000})


def test_wrong_seeds_for_the_installed_loadgen():
    found = rules.preflight(RunSpec(benchmark="resnet50", valid=True), rules.load("v6.0"))
    assert [p.code for p in found] == ["wrong-seeds"]
    assert "v6.1 seeds" in found[0].message
    assert codes(RunSpec(benchmark="resnet50", valid=True), seeds=lambda: None) == ["seeds-unknown"]


def test_accuracy_run_must_cover_the_dataset():
    assert codes(RunSpec(benchmark="resnet50", mode="accuracy", max_samples=500)) == ["accuracy-coverage"]
    assert codes(RunSpec(benchmark="resnet50", mode="accuracy"), dataset_size=1000) == ["accuracy-coverage"]
    spec = RunSpec(benchmark="bert-99", mode="accuracy",
                   set={"accuracy_sample_count_override": 100})
    assert codes(spec) == ["accuracy-coverage"]


def test_performance_sample_count_and_query_caps():
    assert codes(RunSpec(benchmark="resnet50", valid=True, performance_sample_count=500)) == [
        "performance-sample-count"]
    assert codes(RunSpec(benchmark="resnet50", valid=True, max_query_count=100)) == ["max-query-count"]


def test_closed_offline_samples_per_query():
    spec = RunSpec(benchmark="resnet50", valid=True, min_query_count=100, target_qps=10)
    assert codes(spec) == ["offline-samples-per-query"]
    assert codes(spec, division="open") == []
    fast = RunSpec(benchmark="resnet50", valid=True, min_query_count=100, target_qps=1000)
    assert codes(fast) == []  # 1.1 x 600 s x 1000 qps = 660000 samples


def test_closed_server_latency_bound():
    spec = RunSpec(benchmark="resnet50", scenario="Server", valid=True, server_latency=50)
    assert codes(spec) == ["server-latency"]
    assert codes(spec, division="open") == []


def test_not_a_round_benchmark():
    assert codes(RunSpec(benchmark="demo", valid=True)) == ["not-a-round-benchmark"]
    assert codes(RunSpec(benchmark="retinanet", valid=True)) == ["not-a-round-benchmark"]
    assert codes(RunSpec(benchmark="retinanet", valid=True), rules.load("v6.0"),
                 seeds=lambda: dict(rules.load("v6.0").seeds)) == []


def test_round_runs_set_their_seeds_and_name_the_rounds_other_settings():
    """--round v3.0: no seed problem (set from code); a --valid MultiStream run would use LoadGen
    6.0.17's min_query_count 662 where v3.0's mlperf.conf sets 270336 — named, with the flag."""
    from mlharness.spec import RunSpec

    v30 = rules.load("v3.0")
    spec = RunSpec(benchmark="resnet50", scenario="MultiStream", valid=True, target_latency=5.0,
                   round="v3.0")
    problems = rules.preflight(spec, v30)
    assert [(p.code, p.fix) for p in problems] == [("round-setting", "pass --min-query-count 270336")]
    fixed = spec.replace(min_query_count=270336)
    assert rules.preflight(fixed, v30) == []
    no_round = RunSpec(benchmark="resnet50", scenario="Offline", valid=True, target_qps=100.0)
    assert [p.code for p in rules.preflight(no_round, v30)] == ["wrong-seeds"]
    assert "--round v3.0" in rules.preflight(no_round, v30)[0].fix
