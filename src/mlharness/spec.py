"""RunSpec: the validated description of one run, built once at the edge (CLI flags / TOML)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from mlharness.errors import ConfigError
from mlharness.files import read_toml
from mlharness.loadgen.settings import MODES, SCENARIOS, TestConfig

PRECISIONS = ("fp32", "bf16", "int8")
_SCENARIO_BY_LOWER = {s.lower(): s for s in SCENARIOS}


@dataclass
class RunSpec:
    benchmark: str
    scenario: str = "Offline"
    mode: str = "performance"
    backend: str = "onnxruntime"
    model: Path | None = None
    dataset: Path | None = None
    vocab: Path | None = None
    cache_dir: Path | None = None
    short: bool = True  # --test (default) vs --valid
    target_qps: float | None = None
    target_latency_ms: float | None = None
    server_latency_ms: float | None = None
    min_duration_ms: int | None = None
    min_query_count: int | None = None
    max_query_count: int | None = None
    performance_sample_count: int | None = None
    max_samples: int | None = None
    batch_size: int | None = None
    workers: int = 1
    threads: int | None = None
    precision: str = "fp32"
    device: str = "cpu"
    length_sort: bool = True
    output_dir: Path = Path("runs")
    audit_config: Path | None = None
    label: str | None = None  # run directory name part instead of the mode (e.g. TEST01)
    stall_timeout_s: float = 60.0
    enable_trace: bool = False
    backend_options: dict[str, Any] = field(default_factory=dict)
    # several backend instances, each with its own worker thread and pinned cores
    instances: int = 1
    threads_per_instance: int | None = None
    user_conf_extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        scenario = _SCENARIO_BY_LOWER.get(str(self.scenario).lower())
        if scenario is None:
            raise ConfigError(f"unknown scenario {self.scenario!r}",
                              hint="choose one of: " + ", ".join(SCENARIOS))
        self.scenario = scenario
        if self.mode not in MODES:
            raise ConfigError(f"unknown mode {self.mode!r}", hint="use performance or accuracy")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"unknown precision {self.precision!r}",
                              hint="choose one of: " + ", ".join(PRECISIONS))
        for name in ("target_qps", "target_latency_ms", "server_latency_ms"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"{name.replace('_', '-')} must be > 0, got {value}",
                                  hint="give a positive number")
        for name in ("min_duration_ms", "min_query_count", "max_query_count",
                     "performance_sample_count", "max_samples", "batch_size", "threads"):
            value = getattr(self, name)
            if value is not None and value < 1 and name != "min_duration_ms":
                raise ConfigError(f"{name.replace('_', '-')} must be >= 1, got {value}",
                                  hint="give a positive integer")
        if self.instances < 1 or (self.threads_per_instance is not None
                                  and self.threads_per_instance < 1):
            raise ConfigError("instances and threads-per-instance must be >= 1",
                              hint="e.g. --instances 2 --threads-per-instance 1")
        if self.workers < 1:
            raise ConfigError(f"workers must be >= 1, got {self.workers}", hint="use --workers 1")
        if self.target_latency_ms is not None and self.scenario not in ("SingleStream", "MultiStream"):
            raise ConfigError(f"--target-latency applies to SingleStream/MultiStream, not {self.scenario}",
                              hint="use --target-qps for Server and Offline")
        if self.server_latency_ms is not None and self.scenario != "Server":
            raise ConfigError("--server-latency applies to the Server scenario only",
                              hint="drop it or use --scenario Server")
        if self.target_qps is not None and self.scenario not in ("Server", "Offline"):
            raise ConfigError(f"--target-qps applies to Server/Offline, not {self.scenario}",
                              hint="use --target-latency for SingleStream and MultiStream")
        if self.mode == "accuracy" and (self.min_duration_ms or self.min_query_count):
            raise ConfigError("accuracy mode runs every sample once; duration/query counts do not apply",
                              hint="drop --min-duration/--min-query-count or use --mode performance")
        if self.label is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", self.label):
            raise ConfigError(f"label {self.label!r} is not a plain name",
                              hint="use letters, digits, '.', '_' or '-'")
        if self.stall_timeout_s <= 0:
            raise ConfigError("stall timeout must be > 0", hint="e.g. --stall-timeout 60")
        for name in ("model", "dataset", "vocab", "cache_dir", "audit_config"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path):
                setattr(self, name, Path(value).expanduser())
        self.output_dir = Path(self.output_dir).expanduser()

    def test_config(self, loadgen_model: str) -> TestConfig:
        """The LoadGen side of this spec."""
        return TestConfig(
            model=loadgen_model, scenario=self.scenario, mode=self.mode, short=self.short,
            target_qps=self.target_qps, target_latency_ms=self.target_latency_ms,
            server_latency_ms=self.server_latency_ms, min_duration_ms=self.min_duration_ms,
            min_query_count=self.min_query_count, max_query_count=self.max_query_count,
            performance_sample_count=self.performance_sample_count,
            extra=dict(self.user_conf_extra), enable_trace=self.enable_trace,
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, Path):
                out[key] = str(value)
        return out

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> RunSpec:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown setting(s): {', '.join(unknown)}",
                              hint="valid keys: " + ", ".join(sorted(known)))
        if "benchmark" not in data:
            raise ConfigError("no benchmark given", hint="pass --benchmark or set benchmark in the TOML")
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(f"bad settings: {exc}", hint="check the value types") from exc


def load_toml(path: Path) -> dict[str, Any]:
    """Read a run TOML file (keys as in RunSpec; ``[run]`` table or top level)."""
    data = read_toml(path, "config file", hint_missing="check the --config path")
    data = data.get("run", data)
    return {k.replace("-", "_"): v for k, v in data.items()}
