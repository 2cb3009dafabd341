from pathlib import Path

import pytest

from mlharness.errors import ConfigError
from mlharness.spec import RunSpec, load_toml


def test_scenario_names_are_normalised() -> None:
    assert RunSpec(benchmark="demo", scenario="singlestream").scenario == "SingleStream"


@pytest.mark.parametrize("kwargs,message", [
    ({"scenario": "Batch"}, "unknown scenario"),
    ({"mode": "fast"}, "unknown mode"),
    ({"precision": "fp8"}, "unknown precision"),
    ({"target_qps": -1}, "^target_qps must be > 0"),  # not pydantic's target_qps.constrained-float
    ({"batch_size": 0}, "must be >= 1"),
    ({"workers": 0}, "workers must be >= 1"),
    ({"scenario": "Offline", "target_latency": 5}, "--target-latency applies"),
    ({"scenario": "SingleStream", "target_qps": 5}, "--target-qps applies"),
    ({"scenario": "Offline", "server_latency": 5}, "--server-latency applies"),
    ({"mode": "accuracy", "min_query_count": 5}, "accuracy mode runs every sample once"),
])
def test_bad_settings_raise_config_error_with_hint(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        RunSpec(benchmark="demo", **kwargs)
    assert info.value.hint


def test_unknown_keys_are_named() -> None:
    with pytest.raises(ConfigError, match="unknown setting.*target_qsp"):
        RunSpec.from_mapping({"benchmark": "demo", "target_qsp": 3})


def test_toml_run_table_and_dashes(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text('[run]\nbenchmark = "demo"\ntarget-qps = 12.5\nscenario = "Server"\n')
    spec = RunSpec.from_mapping(load_toml(path))
    assert spec.target_qps == 12.5 and spec.scenario == "Server"


def test_bad_toml_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text("benchmark = \n")
    with pytest.raises(ConfigError):
        load_toml(path)
    with pytest.raises(ConfigError, match="not found"):
        load_toml(tmp_path / "missing.toml")


def test_spec_round_trips_through_dict() -> None:
    spec = RunSpec(benchmark="demo", model=Path("m.onnx"), scenario="Server", target_qps=3)
    again = RunSpec.from_mapping(spec.to_dict())
    assert again == spec
