"""The typed view of one round's rule tables (``rules/<round>.toml`` over ``rules/common.toml``):
one :class:`BenchmarkRules` for every benchmark, whatever its kind, and the round's :class:`Rules`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mlharness.errors import ConfigError


def accuracy_delta_percent(benchmark: str) -> float:
    """How far TEST01's compliance accuracy may stray from its baseline, in percent: 0.1 for a
    ``99.9`` benchmark, 1 otherwise (the checker's ``Config.get_delta_perc``, whose per-model
    table names only stable-diffusion-xl)."""
    return 0.1 if "99.9" in benchmark else 1.0


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TokenLimit(_Frozen):
    """p99 time to first token and time per output token the checker allows (ns, strict <)."""

    ttft_ns: int = Field(gt=0)
    tpot_ns: int = Field(gt=0)

    def passes(self, ttft_p99_ns: float, tpot_p99_ns: float) -> bool:
        """The checker's test (performance_check.py ``llm_check``): both strictly below."""
        return ttft_p99_ns < self.ttft_ns and tpot_p99_ns < self.tpot_ns


class Generation(_Frozen):
    """How the reference harness samples (max/min new tokens, temperature, top-p, top-k)."""

    max_new_tokens: int = Field(gt=0)
    min_new_tokens: int = Field(ge=0)
    temperature: float = Field(ge=0)
    top_p: float = Field(gt=0, le=1)
    top_k: int  # -1: no limit; 1: greedy
    #: the chat template the MLCommons endpoints client sends with a chat request, so that the
    #: server's prompt is the reference's ``tok_input`` (None: the server's own template)
    chat_template: str | None = None
    #: the reference client sends no sampling key (the numbers above are the server's defaults
    #: it then gets, for the record): qwen3-vl
    server_sampling: bool = False


class AccuracyBound(_Frozen):
    """One accuracy metric's bound: ``reference x fraction`` as constants.py writes it."""

    metric: str
    reference: float = Field(gt=0)
    fraction: float = Field(gt=0)

    @property
    def value(self) -> float:
        return self.reference * self.fraction


#: the optional scenarios of which a closed datacenter result must hold one (``check_scenarios``
#: in the checker's loader.py: "(one of) Interactive or Server")
ONE_OF = ("Interactive", "Server")


class BenchmarkRules(_Frozen):
    """What a round demands of one benchmark, whatever its kind (one ``[benchmarks.<name>]``
    table of ``rules/<round>.toml``). ``name`` is the submission directory name; ``harness``
    the ``mlharness run --benchmark`` name (the same unless the table says otherwise)."""

    name: str
    harness: str = ""
    #: in the round's checker's model list; False: kept to read older results only
    in_round: bool = True
    loadgen_model: str
    #: the mlperf.conf key of its Interactive scenario (LoadGen's Server); None: none
    interactive_loadgen_model: str | None = None
    #: the reference dataset (the LLMs' scorer is chosen by it)
    dataset: str | None = None
    dataset_size: int = Field(gt=0)
    performance_sample_count: int = Field(gt=0)
    #: samples a closed Offline run must issue (OFFLINE_MIN_SPQ_SINCE_V4)
    offline_min_samples_per_query: int = Field(gt=0)
    #: samples an accuracy run covers when not the whole dataset (gpt-oss-120b: 4395)
    accuracy_sample_count: int | None = None
    min_queries: dict[str, int]
    server_latency_ns: int | None = None
    compliance_tests: tuple[str, ...] = ()
    required_scenarios: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    optional_scenarios: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    #: the detail-log key of the result per scenario where it is not the usual one
    #: (the LLMs' tokens per second)
    result_fields: dict[str, str] = Field(default_factory=dict)
    #: TTFT/TPOT p99 limits per scenario (the LLMs' Server and Interactive)
    token_latency_ns: dict[str, TokenLimit] = Field(default_factory=dict)
    #: the targets, the main metric first; each must be reported and reached
    accuracy: tuple[AccuracyBound, ...] = Field(min_length=1)
    #: upper limits, checked where reported (the LLMs' generated length)
    accuracy_upper: tuple[AccuracyBound, ...] = ()
    #: how ``accuracy.txt`` lines are read, per metric (the round's ``[accuracy_regex]``)
    accuracy_regex: dict[str, str]
    #: mlperf.conf lines of this benchmark (word for word)
    mlperf_conf: dict[str, int] = Field(default_factory=dict)
    #: how the reference harness samples; None: not a generation benchmark
    generation: Generation | None = None
    test09_output_tokens: dict[str, float] | None = None  # {"min": ..., "max": ...}
    test07_accuracy_threshold: float | None = None
    #: the end-to-end p99 latency bound per scenario (ns; ``latency-constraint``) of a
    #: generation benchmark judged on it, not on tokens (qwen3-vl: Server and Interactive)
    latency_ns: dict[str, int] = Field(default_factory=dict)
    #: a scenario with accuracy targets of its own (qwen3-vl's Interactive, on its 8k set)
    accuracy_by_scenario: dict[str, tuple[AccuracyBound, ...]] = Field(default_factory=dict)
    #: a scenario with an accuracy set of its own (``accuracy-sample-count`` as a dict)
    accuracy_sample_count_by_scenario: dict[str, int] = Field(default_factory=dict)
    #: user.conf keys per scenario that mlperf.conf does not give (a scenario it has no key of:
    #: qwen3-vl's Interactive runs under its Server key with its own bound and sample count)
    user_conf: dict[str, dict[str, int | float]] = Field(default_factory=dict)
    #: the format of the reference's results: LoadGen's logs, or the endpoints client's files
    #: (``submit --format auto`` lays the result out in it where the checker allows it)
    reference_format: Literal["loadgen", "endpoints"] = "loadgen"

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            data.setdefault("harness", data.get("name", ""))
            data["required_scenarios"] = {normalize_system_type(k): v for k, v in
                                          data.get("required_scenarios", {}).items()}
            data["optional_scenarios"] = {normalize_system_type(k): v for k, v in
                                          data.get("optional_scenarios", {}).items()}
        return data

    @model_validator(mode="after")
    def _readable(self) -> BenchmarkRules:
        metrics = {b.metric for b in self.accuracy + self.accuracy_upper}
        metrics |= {b.metric for bounds in self.accuracy_by_scenario.values() for b in bounds}
        missing = sorted(metrics - set(self.accuracy_regex))
        if missing:
            raise ValueError(f"no accuracy_regex for {', '.join(missing)}")
        return self

    # ---- accuracy ------------------------------------------------------------------------

    @property
    def accuracy_metric(self) -> str:
        """The main metric (the first target)."""
        return self.accuracy[0].metric

    @property
    def accuracy_reference(self) -> float:
        return self.accuracy[0].reference

    @property
    def accuracy_fraction(self) -> float:
        return self.accuracy[0].fraction

    @property
    def accuracy_target(self) -> float:
        """The main metric's threshold (reference x fraction, e.g. 76.46 x 0.99)."""
        return self.accuracy[0].value

    @property
    def accuracy_delta_percent(self) -> float:
        """Allowed TEST01 baseline/compliance accuracy difference (:func:`accuracy_delta_percent`)."""
        return accuracy_delta_percent(self.name)

    @property
    def accuracy_count(self) -> int:
        """Samples an accuracy run covers (gpt-oss-120b scores a 4395-sample subset)."""
        return self.accuracy_sample_count or self.dataset_size

    def accuracy_count_for(self, scenario: str) -> int:
        """Samples ``scenario``'s accuracy run covers (qwen3-vl's Interactive: its 8k set)."""
        return self.accuracy_sample_count_by_scenario.get(scenario, self.accuracy_count)

    def accuracy_for(self, scenario: str) -> tuple[AccuracyBound, ...]:
        """``scenario``'s accuracy targets (its own where the round gives it some)."""
        return self.accuracy_by_scenario.get(scenario, self.accuracy)

    def latency_limit(self, scenario: str) -> int | None:
        """The end-to-end p99 latency bound of ``scenario`` (ns) of a benchmark judged on it."""
        return self.latency_ns.get(scenario)

    def parse_accuracy(self, text: str) -> dict[str, float]:
        """Every metric of this benchmark found in ``accuracy.txt`` text, read line by line as
        the checker does (the first matching line of each)."""
        found: dict[str, float] = {}
        for metric in dict.fromkeys(b.metric for b in self.accuracy + self.accuracy_upper):
            for line in text.splitlines():
                m = re.match(self.accuracy_regex[metric], line)
                if m:
                    found[metric] = float(m.group(1))
                    break
        return found

    def accuracy_value(self, text: str) -> float | None:
        """The main metric's value in ``accuracy.txt`` text; None: no line reads as it."""
        return self.parse_accuracy(text).get(self.accuracy_metric)

    def accuracy_failures(self, values: dict[str, float],
                          scenario: str | None = None) -> list[str]:
        """Why ``values`` fail the targets (each must be reported and reached; ``scenario``'s
        own where it has them) and the upper limits (a reported value must not exceed it);
        empty: they pass."""
        out = []
        for b in self.accuracy_for(scenario) if scenario else self.accuracy:
            v = values.get(b.metric)
            if v is None:
                out.append(f"{b.metric} missing")
            elif v < b.value:
                out.append(f"{b.metric} {v:g} below {b.value:g} ({b.fraction:g} x {b.reference:g})")
        for b in self.accuracy_upper:  # checked only when reported, as accuracy_check.py does
            v = values.get(b.metric)
            if v is not None and v > b.value:
                out.append(f"{b.metric} {v:g} above {b.value:g} ({b.fraction:g} x {b.reference:g})")
        return out

    # ---- scenarios and results -----------------------------------------------------------

    @property
    def uses_token_latencies(self) -> bool:
        """LoadGen reports tokens per second and judges latency per token (TTFT, TPOT) where
        bounded: mlperf.conf sets ``use_token_latencies = 1`` for it."""
        return any(key.endswith(".use_token_latencies") and value == 1
                   for key, value in self.mlperf_conf.items())

    @property
    def generates(self) -> bool:
        """A generation benchmark (its SUT streams tokens; the reference's sampling is known)."""
        return self.generation is not None

    def scenarios_for(self, system_type: str) -> tuple[str, ...] | None:
        """Scenarios a closed submission must hold for ``system_type``; None if the round lists
        none (the official checker cannot judge such a system)."""
        return self.required_scenarios.get(normalize_system_type(system_type))

    def scenario_problems(self, system_type: str, present: list[str]
                          ) -> tuple[list[str], list[str]] | None:
        """``(missing, unknown)`` scenarios of a closed result for ``system_type``, as the
        checker's ``check_scenarios``: each required one, one of Interactive / Server when both
        are optional, and nothing beyond required and optional. None: the round lists no
        required scenarios for that system type (the checker cannot judge it)."""
        required = self.scenarios_for(system_type)
        if required is None:
            return None
        optional = self.optional_scenarios.get(normalize_system_type(system_type), ())
        have = {s.lower() for s in present}
        missing = [s for s in required if s.lower() not in have]
        if set(ONE_OF) <= set(optional) and not have & {s.lower() for s in ONE_OF}:
            missing.append("(one of) " + " or ".join(ONE_OF))
        known = {s.lower() for s in (*required, *optional)}
        unknown = [s for s in present if s.lower() not in known]
        return missing, unknown

    def result_field(self, scenario: str) -> str | None:
        """The detail-log key of the result in LoadGen's ``scenario`` where this benchmark has
        its own (Interactive runs as Server, so its result is Server's field); None: the
        scenario's usual one."""
        return self.result_fields.get("Server" if scenario == "Interactive" else scenario)

    def token_limit(self, scenario: str) -> TokenLimit | None:
        """TTFT/TPOT p99 limits of ``Server`` or ``Interactive`` (None elsewhere)."""
        return self.token_latency_ns.get(scenario)

    def loadgen_model_for(self, scenario: str) -> str:
        """The mlperf.conf model key: Interactive is LoadGen's Server under its own key."""
        if scenario == "Interactive":
            if self.interactive_loadgen_model is None:
                raise ConfigError(f"{self.harness} has no Interactive scenario",
                                  "Interactive is an LLM scenario (e.g. -b llama3.1-8b); "
                                  "use Server")
            return self.interactive_loadgen_model
        return self.loadgen_model


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
    benchmarks: dict[str, BenchmarkRules]  # the round's own (in its checker's model list)
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
    #: benchmarks the round's checker dropped but whose facts it keeps (``in_round = false``),
    #: to read older results with
    kept: dict[str, BenchmarkRules] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def find(self, name: str) -> BenchmarkRules | None:
        """The benchmark by submission directory name or mlharness benchmark name."""
        if name in self.benchmarks:
            return self.benchmarks[name]
        for bench in self.benchmarks.values():
            if bench.harness == name:
                return bench
        return None

    def find_kept(self, name: str) -> BenchmarkRules | None:
        """Like :meth:`find`, also among the benchmarks kept to read older results."""
        return self.find(name) or self.kept.get(name)

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
