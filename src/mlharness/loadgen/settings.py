"""What a test asks of LoadGen, and the ``user.conf`` that carries it.

Everything a user may change is written into ``user.conf`` (``model.scenario.key = value``;
times in ms, per ``loadgen/test_settings_internal.cc`` FromConfig) so that the file kept in the
run directory is exactly what was used. mlperf.conf is the copy compiled into LoadGen.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline")
MODES = ("performance", "accuracy")

#: short-run values used by ``--test``: long enough for early stopping where LoadGen needs it
#: (SingleStream >= 64 queries, MultiStream >= 662 queries; ``loadgen/early_stopping.cc``)
TEST_MIN_DURATION_MS = 2000
TEST_MIN_QUERY_COUNT = {"SingleStream": 64, "MultiStream": 662, "Server": 100, "Offline": 1}


@dataclass
class TestConfig:
    """One LoadGen test: what goes into user.conf plus mode and logging."""

    __test__ = False  # not a pytest class

    model: str  # mlperf.conf key
    scenario: str
    mode: str = "performance"
    short: bool = True  # --test (True) or --valid (False)
    target_qps: float | None = None  # Server target / Offline expected QPS
    target_latency_ms: float | None = None  # SingleStream / MultiStream expected latency
    server_latency_ms: float | None = None  # Server latency bound (open division only)
    min_duration_ms: int | None = None
    min_query_count: int | None = None
    max_query_count: int | None = None
    performance_sample_count: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # raw user.conf keys
    enable_trace: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def samples_per_query(self) -> int:
        return int(self.extra.get("samples_per_query", 8)) if self.scenario == "MultiStream" else 1


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def user_conf_entries(cfg: TestConfig) -> dict[str, Any]:
    """Keys (without the ``model.scenario.`` prefix) that this test sets."""
    entries: dict[str, Any] = {}
    if cfg.target_qps is not None:
        if cfg.scenario in ("Server", "Offline"):
            entries["target_qps"] = cfg.target_qps
    if cfg.target_latency_ms is not None and cfg.scenario in ("SingleStream", "MultiStream"):
        entries["target_latency"] = cfg.target_latency_ms
    if cfg.server_latency_ms is not None and cfg.scenario == "Server":
        entries["target_latency"] = cfg.server_latency_ms
    if cfg.short:
        entries["min_duration"] = TEST_MIN_DURATION_MS
        entries["min_query_count"] = TEST_MIN_QUERY_COUNT[cfg.scenario]
    if cfg.min_duration_ms is not None:
        entries["min_duration"] = cfg.min_duration_ms
    if cfg.min_query_count is not None:
        entries["min_query_count"] = cfg.min_query_count
    if cfg.max_query_count is not None:
        entries["max_query_count"] = cfg.max_query_count
    if cfg.performance_sample_count is not None:
        entries["performance_sample_count_override"] = cfg.performance_sample_count
    entries.update(cfg.extra)
    return entries


def render_user_conf(cfg: TestConfig) -> str:
    """The user.conf text for this test."""
    lines = [
        "# user.conf written by mlharness; mlperf.conf is the copy compiled into LoadGen",
        f"# run length: {'test (short, not valid for submission)' if cfg.short else 'valid'}",
    ]
    for key, value in user_conf_entries(cfg).items():
        lines.append(f"{cfg.model}.{cfg.scenario}.{key} = {_fmt(value)}")
    return "\n".join(lines) + "\n"
