from mlharness.loadgen.settings import TestConfig, render_user_conf, user_conf_entries


def test_test_mode_shortens_duration_and_counts() -> None:
    text = render_user_conf(TestConfig("resnet50", "MultiStream", target_latency_ms=12.5))
    assert "resnet50.MultiStream.min_duration = 2000" in text
    assert "resnet50.MultiStream.min_query_count = 662" in text  # early stopping needs 662
    assert "resnet50.MultiStream.target_latency = 12.5" in text


def test_valid_mode_leaves_round_rules_to_mlperf_conf() -> None:
    entries = user_conf_entries(TestConfig("bert", "Offline", short=False, target_qps=40.0))
    assert entries == {"target_qps": 40.0}
    assert "bert.Offline.target_qps = 40\n" in render_user_conf(
        TestConfig("bert", "Offline", short=False, target_qps=40.0))


def test_target_keys_only_for_their_scenarios() -> None:
    assert "target_qps" not in user_conf_entries(TestConfig("m", "SingleStream", target_qps=5))
    assert "target_latency" not in user_conf_entries(TestConfig("m", "Offline",
                                                                target_latency_ms=5))
    server = user_conf_entries(TestConfig("m", "Server", target_qps=5, server_latency_ms=50))
    assert server["target_qps"] == 5 and server["target_latency"] == 50


def test_explicit_overrides_win_over_test_defaults() -> None:
    entries = user_conf_entries(TestConfig("m", "SingleStream", min_duration_ms=500,
                                           min_query_count=10, max_query_count=20,
                                           performance_sample_count=64,
                                           extra={"sample_concatenate_permutation": 1}))
    assert entries["min_duration"] == 500
    assert entries["min_query_count"] == 10
    assert entries["max_query_count"] == 20
    assert entries["performance_sample_count_override"] == 64
    assert entries["sample_concatenate_permutation"] == 1


def test_multistream_samples_per_query_follows_extra() -> None:
    assert TestConfig("m", "MultiStream").samples_per_query() == 8
    assert TestConfig("m", "MultiStream", extra={"samples_per_query": 4}).samples_per_query() == 4
    assert TestConfig("m", "Offline").samples_per_query() == 1
