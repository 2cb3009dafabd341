"""Named SUT configurations: ``suts/NAME.toml``, the targets and engine settings tune chose.

One file per system (like per-system configs in submitters' harnesses): per benchmark and
scenario, the target, the engine settings it was measured with, and when and how. Example::

    name = "mybox"
    [benchmarks.demo.Server]
    target_qps = 1523.4
    measured = 1904.3
    measured_at = "2026-11-23T13:40:00+00:00"
    method = "bracketing search, 11 probes; target = best VALID target QPS x 0.8"
    [benchmarks.demo.Server.settings]
    workers = 1
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from mlharness.errors import ConfigError
from mlharness.files import read_toml, write_text_atomic
from mlharness.options import field_path

SUT_DIR = "suts"
SettingValue = int | float | str | bool


class SutEntry(BaseModel):
    """One benchmark x scenario of a SUT: what a run should use."""

    model_config = ConfigDict(extra="forbid")

    target_qps: float | None = None  # Server, Offline
    target_latency: float | None = None  # ms: SingleStream, MultiStream expected latency
    settings: dict[str, SettingValue] = {}  # engine settings (batch_size, workers, ...)
    measured: float | None = None  # what tune measured (samples/s, best VALID QPS, latency ms)
    measured_at: str | None = None
    method: str | None = None
    host: str | None = None


    def user_conf(self) -> dict[str, float]:
        """The user.conf keys this entry supplies (its target)."""
        # the user.conf key of a SingleStream/MultiStream expected latency is "target_latency"
        # (loadgen/test_settings_internal.cc FromConfig), like the run setting's name
        return {k: v for k, v in (("target_qps", self.target_qps),
                                  ("target_latency", self.target_latency)) if v is not None}


class SutConfig(BaseModel):
    """A named system: ``benchmarks[benchmark][scenario]`` -> SutEntry."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    benchmarks: dict[str, dict[str, SutEntry]] = {}

    def entry(self, benchmark: str, scenario: str) -> SutEntry | None:
        return self.benchmarks.get(benchmark, {}).get(scenario)

    def set_entry(self, benchmark: str, scenario: str, entry: SutEntry) -> None:
        self.benchmarks.setdefault(benchmark, {})[scenario] = entry


def sut_path(name_or_path: str | Path, base: Path | None = None) -> Path:
    """``NAME`` -> ``<base>/suts/NAME.toml``; anything with a ``/`` or ``.toml`` is a path."""
    text = str(name_or_path)
    if "/" in text or text.endswith(".toml"):
        return Path(text).expanduser()
    return (base or Path.cwd()) / SUT_DIR / f"{text}.toml"


def load_sut(name_or_path: str | Path, base: Path | None = None) -> SutConfig:
    """Read and validate a SUT configuration."""
    path = sut_path(name_or_path, base)
    if not path.is_file():
        raise ConfigError(f"no SUT configuration {path}",
                          hint=f"measure one first: mlharness tune -b BENCHMARK --sut "
                               f"{name_or_path}")
    data = read_toml(path, "SUT configuration")
    try:
        return SutConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = field_path(first["loc"])
        raise ConfigError(f"{path}: {where}: {first['msg']}",
                          hint="fix the file or re-create it with mlharness tune --sut") from exc


def save_sut(config: SutConfig, name_or_path: str | Path, base: Path | None = None) -> Path:
    """Write ``config`` (atomically) and return its path."""
    import tomli_w

    path = sut_path(name_or_path, base)
    path.parent.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = config.model_dump(exclude_none=True)
    write_text_atomic(path, tomli_w.dumps(data))
    return path


def open_or_new(name_or_path: str | Path, base: Path | None = None) -> SutConfig:
    """The existing configuration, or an empty one named after the file."""
    path = sut_path(name_or_path, base)
    return load_sut(path) if path.is_file() else SutConfig(name=path.stem)
