"""The typed view of one round's rule tables (``rules/<round>.toml`` over ``rules/common.toml``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from mlharness.errors import ConfigError


def accuracy_delta_percent(benchmark: str) -> float:
    """How far TEST01's compliance accuracy may stray from its baseline, in percent: 0.1 for a
    ``99.9`` benchmark, 1 otherwise (the checker's ``Config.get_delta_perc``, whose per-model
    table names only stable-diffusion-xl)."""
    return 0.1 if "99.9" in benchmark else 1.0


@dataclass(frozen=True)
class BenchmarkRules:
    """What a round demands of one benchmark. ``name`` is the submission directory name."""

    name: str
    harness: str
    loadgen_model: str
    accuracy_metric: str
    accuracy_reference: float
    accuracy_fraction: float
    accuracy_regex: str
    dataset_size: int
    performance_sample_count: int
    offline_min_samples_per_query: int
    min_queries: dict[str, int]
    server_latency_ns: int | None
    compliance_tests: tuple[str, ...]
    required_scenarios: dict[str, tuple[str, ...]]

    @property
    def accuracy_target(self) -> float:
        """The threshold the checker compares with (reference x fraction, e.g. 76.46 x 0.99)."""
        return self.accuracy_reference * self.accuracy_fraction

    @property
    def accuracy_delta_percent(self) -> float:
        """Allowed TEST01 baseline/compliance accuracy difference (:func:`accuracy_delta_percent`)."""
        return accuracy_delta_percent(self.name)

    def scenarios_for(self, system_type: str) -> tuple[str, ...] | None:
        """Scenarios a closed submission must hold for ``system_type``; None if the round lists
        none (the official checker cannot judge such a system)."""
        return self.required_scenarios.get(normalize_system_type(system_type))

    def parse_accuracy(self, text: str) -> float | None:
        """The metric value in ``accuracy.txt`` text, read line by line as the checker does."""
        for line in text.splitlines():
            m = re.match(self.accuracy_regex, line)
            if m:
                return float(m.group(1))
        return None


def normalize_system_type(system_type: str) -> str:
    """``edge,datacenter`` and ``datacenter,edge`` are the same suite."""
    parts = sorted(p.strip() for p in str(system_type).split(",") if p.strip())
    return ",".join(parts)


@dataclass(frozen=True)
class Test05Rule:
    """How a round's ``compliance/nvidia/TEST05/verify_performance.py`` judges the audit."""

    threshold: float
    wide_threshold: float  # reference SingleStream <= 200000 ns / MultiStream <= 1600000 ns
    two_sided: bool  # inside reference x (1 +- t); else one-sided per scenario
    throughput_scenarios: tuple[str, ...] = ()  # one-sided: score > reference x (1 - t)


@dataclass(frozen=True)
class Rules:
    """One round's rules."""

    round: str
    checker_version: str
    loadgen_version: str  # the mlcommons-loadgen release whose mlperf.conf has the round's seeds
    audit: dict[str, Any]  # compliance audit.config values (``[audit]`` in common.toml)
    layout: str
    seeds: dict[str, int]
    benchmarks: dict[str, BenchmarkRules]
    retired_benchmarks: tuple[str, ...]
    retired_tests: tuple[str, ...]
    divisions: tuple[str, ...]
    statuses: tuple[str, ...]
    system_types: tuple[str, ...]
    scenarios: tuple[str, ...]
    min_duration_ms: int
    max_accuracy_log_bytes: int
    truncate_keep_bytes: int
    system_required: tuple[str, ...]
    system_meaningful: tuple[str, ...]
    system_network: tuple[str, ...]
    measurements_required: tuple[str, ...]
    measurements_files: tuple[str, ...]
    hash_regex: str
    #: seeds of a TEST05 audit (rounds before v5.0); empty where TEST05 is retired
    test05_seeds: dict[str, int] = field(default_factory=dict)
    #: the round's mlperf.conf lines for the models mlharness runs (seeds aside), as text values
    mlperf_conf: dict[str, str] = field(default_factory=dict)
    #: the round's own checker under ``rounds/<round>/`` (empty: today's checker package)
    checker_script: str = ""
    #: TEST05's verdict rule (rounds that required TEST05)
    test05: Test05Rule | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def find(self, name: str) -> BenchmarkRules | None:
        """The benchmark by submission directory name or mlharness benchmark name."""
        if name in self.benchmarks:
            return self.benchmarks[name]
        for bench in self.benchmarks.values():
            if bench.harness == name:
                return bench
        return None

    def benchmark(self, name: str) -> BenchmarkRules:
        """Like :meth:`find` but explains why a name cannot count for this round."""
        bench = self.find(name)
        if bench is not None:
            return bench
        known = ", ".join(f"{b.harness} ({b.name})" for b in self.benchmarks.values())
        if name == "demo":
            raise ConfigError(
                "the demo benchmark (UCI digits) is not an MLPerf benchmark and cannot count "
                f"for {self.round}",
                hint="practise the submission flow with resnet50 on synthetic images (docs/"
                "submission.md, \"Practising with synthetic data\"); "
                f"{self.round} benchmarks: {known}",
            )
        if name in self.retired_benchmarks:
            raise ConfigError(
                f"{name} is retired in {self.round}: the round has no rules for it",
                hint=f"choose an older round (--round v6.0) or one of: {known}",
            )
        raise ConfigError(f"{name} is not a {self.round} benchmark mlharness knows",
                          hint=f"choose one of: {known}")
