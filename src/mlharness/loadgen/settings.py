"""What a test asks of LoadGen, the one decision of its effective settings, and its ``user.conf``.

Everything a user may change is written into ``user.conf`` (``model.scenario.key = value``;
times in ms, per ``loadgen/test_settings_internal.cc`` FromConfig) so that the file kept in the
run directory is exactly what was used. mlperf.conf is the copy compiled into LoadGen.

Precedence of one key, highest first (:func:`effective_settings`):

1. ``flag`` — a run flag (``--target-qps`` …) or ``--set KEY=VALUE`` (never both for one key:
   ``--set`` of a key that has its own flag is refused); ``measured`` — a target the run
   measured first with probe runs (``--target-qps auto``, or none given for a ``--test`` run),
   in the flag's place (``TestConfig.measured``);
2. ``sut-config`` — a named SUT configuration (``TestConfig.sut``);
3. ``test-run`` — the short-run values of ``--test``;
3b. ``rules`` — the round's values for a scenario that mlperf.conf has no key for
   (``TestConfig.rules``: qwen3-vl's Interactive latency bound and sample count);
4. ``mlperf.conf`` — the copy compiled into the installed LoadGen (``model.scenario.key``, then
   ``*.scenario.key``, ``model.*.key``, ``*.*.key``, as LoadGen looks them up);
5. ``loadgen-default`` — LoadGen's built-in default (``loadgen/test_settings.h``).

Layers 1-3b go into ``user.conf``; 4-5 are what LoadGen uses when user.conf is silent.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from mlharness import hostinfo
from mlharness.errors import ConfigError
from mlharness.loadgen.installed import embedded_conf
from mlharness.names import (LOADGEN_SCENARIOS, MULTISTREAM_SAMPLES_PER_QUERY, QPS_SCENARIOS,
                             Scenario)

SCENARIOS = LOADGEN_SCENARIOS

#: short-run values used by ``--test``: long enough for early stopping where LoadGen needs it
#: (SingleStream >= 64 queries, MultiStream >= 662 queries; ``loadgen/early_stopping.cc``)
TEST_MIN_DURATION_MS = 2000
TEST_MIN_QUERY_COUNT = {"SingleStream": 64, "MultiStream": 662, "Server": 100, "Offline": 1}
#: a Server run with token latencies (the LLMs, Interactive too) is judged by early stopping on
#: TTFT and TPOT at p99, which needs 459 queries when all are within the limits (LoadGen 6.0:
#: "Processed 120 queries ... would need to run at least 339 more"; loadgen/early_stopping.cc)
TEST_MIN_TOKEN_SERVER_QUERIES = 460
#: the samples a --test run of a token benchmark (the LLMs) loads, where mlperf.conf sets the
#: whole data set (llama3.1-8b 13,368) and equal issue (``sample_concatenate_permutation``)
#: rounds a run up to a multiple of the samples loaded (LoadGen 6.0.17: 110 Offline samples
#: became 112 with 8 loaded): Offline then issued all 13,368 samples and Server 13,368 queries,
#: minutes to hours, and a lowered ``max_query_count`` made LoadGen log an error (INVALID).
#: Offline: 100 samples; Server and Interactive: the 460 queries of early stopping. A data set
#: no larger is left alone (its runs are short already, and the checker reads mlperf.conf's
#: count). ``--valid``, or ``--performance-sample-count N``, runs the full length.
TEST_TOKEN_PERFORMANCE_SAMPLES = {"Offline": 100, "Server": TEST_MIN_TOKEN_SERVER_QUERIES}

#: keys LoadGen reads from a user.conf (``TestSettings::FromConfig`` in
#: ``loadgen/test_settings_internal.cc``; the seeds, ``accuracy_log_probability`` and ``test05*``
#: are read from mlperf.conf only and are therefore not here)
USER_CONF_KEYS = frozenset({
    "mode", "use_token_latencies", "ttft_latency", "tpot_latency", "infer_token_latencies",
    "token_latency_scaling_factor", "target_latency_percentile", "samples_per_query",
    "target_latency", "performance_issue_unique", "performance_issue_same",
    "performance_issue_same_index", "sample_concatenate_permutation", "coalesce_queries",
    "max_async_queries", "min_duration", "max_duration", "min_query_count", "max_query_count",
    "performance_sample_count_override", "accuracy_sample_count_override", "target_qps",
    "print_timestamps", "accuracy_log_rng_seed", "accuracy_log_sampling_target",
})

#: LoadGen's built-in defaults (``loadgen/test_settings.h``), in user.conf units (ms, QPS)
_LOADGEN_DEFAULTS: dict[str, dict[str, float]] = {
    "*": {"min_duration": 10000, "max_duration": 0, "min_query_count": 100,
          "max_query_count": 0, "performance_sample_count_override": 0,
          "accuracy_sample_count_override": 0},
    "SingleStream": {"target_latency": 1.0},
    "MultiStream": {"target_latency": 8.0, "samples_per_query": MULTISTREAM_SAMPLES_PER_QUERY},
    "Server": {"target_latency": 100.0, "target_qps": 1.0},
    "Offline": {"target_qps": 1.0},
}

#: the largest numbers LoadGen can hold (``loadgen/test_settings.h``): counts are ``uint64_t``
#: (read from user.conf with ``strtoull``, which saturates rather than fails), durations are
#: ``uint64_t`` ms turned into ``std::chrono`` nanoseconds (``int64``) by
#: ``loadgen/test_settings_internal.cc``; beyond these LoadGen overflows into nonsense sizes
MAX_COUNT = 2**64 - 1
MAX_DURATION_MS = (2**63 - 1) // 1_000_000
#: user.conf keys that are times in ms (latencies: ms x 1e6 = ns in a ``uint64_t``)
DURATION_KEYS = frozenset({"min_duration", "max_duration", "target_latency", "ttft_latency",
                           "tpot_latency"})

#: LoadGen keeps every generated query in memory: 460 bytes each, measured with LoadGen 6.0
#: (peak RSS of 20 M SingleStream and 10 M Server queries). A 600 s SingleStream run at a
#: 0.015 ms hint builds 80 M queries: 37 GB
BYTES_PER_QUERY = 460
MIN_QUERY_BUDGET = 4_000_000  # always allowed (1.8 GB)
#: at most this share of the memory available now goes to LoadGen's queries (a 600 s run of the
#: demo's 0.03 ms SingleStream needs 20 M queries, 40 M generated: 18 GB of a 24 GB machine's 22)
MEMORY_SHARE = 0.75


def max_generated_queries() -> int:
    """How many queries LoadGen may build up front here: MEMORY_SHARE of the available memory's
    worth, at least MIN_QUERY_BUDGET."""
    available = hostinfo.available_memory_bytes() or 0
    return max(MIN_QUERY_BUDGET, int(available * MEMORY_SHARE / BYTES_PER_QUERY))


def query_set_error(queries: int, what: str, hint: str) -> ConfigError:
    """The refusal of ``what``, which makes LoadGen build ``queries`` (beyond the budget)."""
    return ConfigError(
        f"{what} makes LoadGen build about {queries / 1e6:.0f} M queries up front "
        f"(~{queries * BYTES_PER_QUERY / 1e9:.0f} GB, more than {MEMORY_SHARE:.0%} of the memory "
        "available)", hint=hint)


#: ``kSlack`` of the Offline query size (``loadgen/test_settings_internal.cc``)
OFFLINE_SLACK = 1.1


def generated_queries(scenario: str, min_duration_ms: float, target: float) -> int:
    """About how many queries LoadGen generates up front, before the first is issued
    (loadgen/loadgen.cc GenerateQueries): SingleStream/MultiStream for twice the min duration at
    the expected latency ``target`` (ms), Server for the min duration at ``target`` QPS, Offline
    one query."""
    if Scenario(scenario).latency_metric:
        return int(2 * min_duration_ms / target)
    if scenario == "Server":
        return int(min_duration_ms / 1000 * target)
    return 1


def check_user_conf_key(key: str, value: Any, owners: Mapping[str, str]) -> float | int:
    """A ``--set KEY=VALUE`` pair as LoadGen would read it, or ConfigError. ``owners``: the keys
    that have a flag of their own (``flags.user_conf_owners``), refused with that flag."""
    if key in owners:
        raise ConfigError(f"--set {key}: this setting has its own flag",
                          hint=f"use {owners[key]} instead")
    if key not in USER_CONF_KEYS:
        raise ConfigError(f"--set {key}: LoadGen does not read this key from user.conf",
                          hint="known keys: " + ", ".join(sorted(USER_CONF_KEYS - set(owners))))
    if isinstance(value, str):
        for cast in (int, float):
            try:
                value = cast(value)
                break
            except ValueError:
                pass
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"--set {key}={value!r}: LoadGen reads only numbers",
                          hint=f"give a number, e.g. --set {key}=1")
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"--set {key}={value}: must be a finite number >= 0",
                          hint="give a non-negative number")
    limit, what = ((MAX_DURATION_MS, "ms fit LoadGen's int64 nanoseconds") if key in DURATION_KEYS
                   else (MAX_COUNT, "fits LoadGen's uint64_t"))
    if value > limit:
        raise ConfigError(f"--set {key}={value:g}: above {limit} (the most that {what})",
                          hint="loadgen/test_settings.h; give a smaller number")
    return value


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
    extra: dict[str, Any] = field(default_factory=dict)  # raw user.conf keys (--set)
    enable_trace: bool = False
    #: hook for a named SUT configuration: user.conf keys below the flags, above --test
    sut: dict[str, Any] = field(default_factory=dict)
    #: the user.conf keys among the flags' whose value was measured by probe runs, not given
    measured: tuple[str, ...] = ()
    #: the task's performance sample count (None: unknown): a short LLM run loads no more
    dataset_samples: int | None = None
    #: the round's user.conf keys for this benchmark and scenario (below --test, above
    #: mlperf.conf): what mlperf.conf lacks for a scenario it has no key of (``rules/llm_*.toml``)
    rules: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def samples_per_query(self) -> int:
        if self.scenario != Scenario.MULTI_STREAM:
            return 1
        return int(self.extra.get("samples_per_query", MULTISTREAM_SAMPLES_PER_QUERY))


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _flag_entries(cfg: TestConfig) -> dict[str, Any]:
    entries: dict[str, Any] = {}
    if cfg.target_qps is not None and Scenario(cfg.scenario).qps_target:
        entries["target_qps"] = cfg.target_qps
    if cfg.target_latency_ms is not None and Scenario(cfg.scenario).latency_metric:
        entries["target_latency"] = cfg.target_latency_ms
    if cfg.server_latency_ms is not None and cfg.scenario == "Server":
        entries["target_latency"] = cfg.server_latency_ms
    if cfg.min_duration_ms is not None:
        entries["min_duration"] = cfg.min_duration_ms
    if cfg.min_query_count is not None:
        entries["min_query_count"] = cfg.min_query_count
    if cfg.max_query_count is not None:
        entries["max_query_count"] = cfg.max_query_count
    if cfg.performance_sample_count is not None:
        entries["performance_sample_count_override"] = cfg.performance_sample_count
    clash = sorted(set(entries) & set(cfg.extra))
    if clash:
        raise ConfigError(f"--set {clash[0]} repeats a setting of its own",
                          hint=f"give {clash[0]} once, by its own setting")
    return {**entries, **cfg.extra}


def _mlperf_conf(conf: Mapping[str, str], model: str, scenario: str, key: str) -> str | None:
    for name in (f"{model}.{scenario}.{key}", f"*.{scenario}.{key}", f"{model}.*.{key}",
                 f"*.*.{key}"):
        if name in conf:
            return conf[name]
    return None


def _number(text: str) -> float | int:
    try:
        return int(text)
    except ValueError:
        return float(text)


@dataclass(frozen=True)
class EffectiveSettings:
    """Every LoadGen setting a test uses, where each came from, and what user.conf must say."""

    model: str
    scenario: str
    mode: str
    short: bool
    trace: bool
    values: dict[str, float | int]  # key -> value LoadGen will use (user.conf units)
    sources: dict[str, str]  # key -> flag | sut-config | test-run | rules | mlperf.conf | loadgen-default
    user_conf: dict[str, float | int]  # the keys user.conf sets (layers flag, sut, test)
    #: equal issue (``sample_concatenate_permutation``): LoadGen rounds the samples it issues
    #: up to a multiple of the samples it loads
    equal_issue: bool = False

    def get(self, key: str) -> float | int | None:
        return self.values.get(key)

    def from_user(self, key: str) -> bool:
        """Whether ``key`` was set by the user (flag or --set), not by a default."""
        return self.sources.get(key) == "flag"

    @property
    def min_duration_ms(self) -> float:
        return float(self.values["min_duration"])

    @property
    def samples_per_query(self) -> int:
        """Samples in one query: MultiStream's query size, Offline's one big query, else 1."""
        if self.scenario == "MultiStream":
            return int(self.values.get("samples_per_query", MULTISTREAM_SAMPLES_PER_QUERY))
        if self.scenario == "Offline":
            target = int(OFFLINE_SLACK * self.min_duration_ms / 1000.0
                         * float(self.values.get("target_qps", 1.0)))
            return max(int(self.values["min_query_count"]), target)
        return 1

    @property
    def generated_queries(self) -> int:
        """Queries LoadGen builds before issuing the first (performance mode)."""
        if self.mode != "performance":
            return 0
        key = "target_qps" if self.scenario in QPS_SCENARIOS else "target_latency"
        return max(int(self.values.get("min_query_count", 1)),
                   generated_queries(self.scenario, self.min_duration_ms,
                                     float(self.values.get(key, 1.0))))

    def expected_duration_s(self) -> float:
        return self.min_duration_ms / 1000.0

    def render_user_conf(self) -> str:
        lines = [
            "# user.conf written by mlharness; mlperf.conf is the copy compiled into LoadGen",
            f"# run length: {'test (short, not valid for submission)' if self.short else 'valid'}",
        ]
        for key, value in self.user_conf.items():
            lines.append(f"{self.model}.{self.scenario}.{key} = {_fmt(value)}")
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return {"values": dict(self.values), "sources": dict(self.sources),
                "user_conf": dict(self.user_conf)}


def effective_settings(cfg: TestConfig, conf: Mapping[str, str] | None = None) -> EffectiveSettings:
    """THE decision of a test's LoadGen settings (precedence in the module docstring).

    ``conf`` is the mlperf.conf as ``{"model.scenario.key": value}`` (default: the copy embedded
    in the installed LoadGen, ``loadgen.installed.embedded_conf``).
    """
    if conf is None:
        conf = embedded_conf()
    flags = _flag_entries(cfg)
    layers: list[tuple[str, dict[str, Any]]] = [
        ("flag", {k: v for k, v in flags.items() if k not in cfg.measured}),
        ("measured", {k: v for k, v in flags.items() if k in cfg.measured})]
    sut = {k: v for k, v in cfg.sut.items()}
    layers.append(("sut-config", sut))
    test: dict[str, Any] = {}
    if cfg.short:
        queries = TEST_MIN_QUERY_COUNT[cfg.scenario]
        tokens = _mlperf_conf(conf, cfg.model, cfg.scenario, "use_token_latencies") == "1"
        if cfg.scenario == Scenario.SERVER and tokens:
            queries = TEST_MIN_TOKEN_SERVER_QUERIES
        test = {"min_duration": TEST_MIN_DURATION_MS, "min_query_count": queries}
        samples = TEST_TOKEN_PERFORMANCE_SAMPLES.get(cfg.scenario) if tokens else None
        if samples and cfg.dataset_samples is not None and cfg.dataset_samples <= samples:
            samples = None  # a data set this small is short already: left as mlperf.conf says
        whole = _mlperf_conf(conf, cfg.model, cfg.scenario, "performance_sample_count_override")
        if samples and cfg.mode == "performance" and whole and _number(whole) > samples:
            test["performance_sample_count_override"] = samples
    layers.append(("test-run", test))
    layers.append(("rules", dict(cfg.rules)))
    user_conf: dict[str, Any] = {}
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for source, entries in layers:
        for key, value in entries.items():
            if key not in values:
                values[key], sources[key] = value, source
                user_conf[key] = value
    known = set(_LOADGEN_DEFAULTS["*"]) | set(_LOADGEN_DEFAULTS.get(cfg.scenario, {}))
    for key in sorted(known):
        if key in values:
            continue
        found = _mlperf_conf(conf, cfg.model, cfg.scenario, key)
        if found is not None:
            values[key], sources[key] = _number(found), "mlperf.conf"
        else:
            default = _LOADGEN_DEFAULTS.get(cfg.scenario, {}).get(key, _LOADGEN_DEFAULTS["*"].get(key))
            values[key], sources[key] = default, "loadgen-default"
    key = "sample_concatenate_permutation"
    equal = user_conf.get(key, _mlperf_conf(conf, cfg.model, cfg.scenario, key))
    return EffectiveSettings(cfg.model, cfg.scenario, cfg.mode, cfg.short, cfg.enable_trace,
                             values, sources, user_conf, str(equal).strip() in ("1", "1.0"))


def user_conf_entries(cfg: TestConfig) -> dict[str, Any]:
    """Keys (without the ``model.scenario.`` prefix) that this test sets in user.conf."""
    return effective_settings(cfg, {}).user_conf


def render_user_conf(cfg: TestConfig) -> str:
    """The user.conf text for this test."""
    return effective_settings(cfg, {}).render_user_conf()
