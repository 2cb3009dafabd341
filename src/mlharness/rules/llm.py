"""The LLM benchmarks' round facts (``rules/llm_<round>.toml``) as typed models.

    from mlharness.rules import llm
    b = llm.load().benchmark("llama3.1-8b")
    b.token_limit("Interactive").ttft_ns     # 500_000_000
    b.accuracy_passes({"ROUGE1": 39.0, ...})  # [] or the failed checks

Kept apart from ``rules/<round>.toml`` until the runner can run these benchmarks (issue 34);
``round_benchmark(rules, name)`` is how the submission code sees both tables.
"""

from __future__ import annotations

import re
import tomllib
from functools import cache
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mlharness.errors import ConfigError
from mlharness.rules.model import BenchmarkRules, Rules, normalize_system_type

ROUNDS = ("v6.1",)
#: the optional scenarios of which a closed datacenter result must hold one (``check_scenarios``
#: in the checker's loader.py: "(one of) Interactive or Server")
ONE_OF = ("Interactive", "Server")


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


class LlmBenchmark(_Frozen):
    """What v6.1 demands of one LLM benchmark (``name`` is the submission directory name)."""

    name: str
    in_round: bool
    loadgen_model: str
    interactive_loadgen_model: str | None = None
    dataset: str
    dataset_size: int = Field(gt=0)
    performance_sample_count: int = Field(gt=0)
    #: samples a closed Offline run must issue (OFFLINE_MIN_SPQ_SINCE_V4)
    offline_min_samples_per_query: int = Field(gt=0)
    accuracy_sample_count: int | None = None
    min_queries: dict[str, int]
    server_latency_ns: int | None = None
    required_scenarios: dict[str, tuple[str, ...]]
    optional_scenarios: dict[str, tuple[str, ...]]
    compliance_tests: tuple[str, ...]
    result_fields: dict[str, str]
    token_latency_ns: dict[str, TokenLimit]
    accuracy: tuple[AccuracyBound, ...]
    accuracy_upper: tuple[AccuracyBound, ...] = ()
    mlperf_conf: dict[str, int]
    generation: Generation
    accuracy_regex: dict[str, str]
    test09_output_tokens: dict[str, float] | None = None  # {"min": ..., "max": ...}
    test07_accuracy_threshold: float | None = None
    #: judged on tokens (TTFT/TPOT, ``use_token_latencies``); False: on the end-to-end latency
    token_latencies: bool = True
    #: the end-to-end p99 latency bound per scenario (ns; ``latency-constraint``) of a
    #: benchmark judged on it (qwen3-vl: Server and Interactive)
    latency_ns: dict[str, int] = Field(default_factory=dict)
    #: a scenario with an accuracy target of its own (qwen3-vl's Interactive, on its 8k set)
    accuracy_by_scenario: dict[str, tuple[AccuracyBound, ...]] = Field(default_factory=dict)
    #: a scenario with an accuracy set of its own (``accuracy-sample-count`` as a dict)
    accuracy_sample_count_by_scenario: dict[str, int] = Field(default_factory=dict)
    #: user.conf keys per scenario that mlperf.conf does not give (a scenario it has no key of:
    #: qwen3-vl's Interactive runs under its Server key with its own bound and sample count)
    user_conf: dict[str, dict[str, int | float]] = Field(default_factory=dict)
    #: the format of the reference's results: LoadGen's logs, or the endpoints client's files
    #: (``submit --format auto`` lays the result out in it where the checker allows it)
    reference_format: Literal["loadgen", "endpoints"] = "loadgen"

    def scenarios_for(self, system_type: str) -> tuple[str, ...] | None:
        """Scenarios a closed submission must hold for ``system_type`` (None: none listed)."""
        return self.required_scenarios.get(normalize_system_type(system_type))

    @property
    def harness(self) -> str:
        """The ``mlharness run --benchmark`` name: the submission directory name itself."""
        return self.name

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
        """The detail-log key of the result in LoadGen's ``scenario`` (Interactive runs as
        Server, so its result is Server's field)."""
        return self.result_fields.get("Server" if scenario == "Interactive" else scenario)

    def token_limit(self, scenario: str) -> TokenLimit | None:
        """TTFT/TPOT p99 limits of ``Server`` or ``Interactive`` (None elsewhere)."""
        return self.token_latency_ns.get(scenario)

    def loadgen_model_for(self, scenario: str) -> str:
        """The mlperf.conf model key: Interactive is LoadGen's Server under ``<model>-interactive``."""
        if scenario == "Interactive":
            if self.interactive_loadgen_model is None:
                raise ConfigError(f"{self.name} has no Interactive scenario",
                                  "its scenarios: " + ", ".join(self.min_queries))
            return self.interactive_loadgen_model
        return self.loadgen_model

    @property
    def accuracy_count(self) -> int:
        """Samples an accuracy run covers (gpt-oss-120b scores a 4395-sample subset)."""
        return self.accuracy_sample_count or self.dataset_size

    def accuracy_count_for(self, scenario: str) -> int:
        """Samples ``scenario``'s accuracy run covers (qwen3-vl's Interactive: its 8k set)."""
        return self.accuracy_sample_count_by_scenario.get(scenario, self.accuracy_count)

    def accuracy_for(self, scenario: str) -> tuple[AccuracyBound, ...]:
        """``scenario``'s accuracy targets (its own where the round gives it one)."""
        return self.accuracy_by_scenario.get(scenario, self.accuracy)

    def latency_limit(self, scenario: str) -> int | None:
        """The end-to-end p99 latency bound of ``scenario`` (ns), if the round sets one."""
        return self.latency_ns.get(scenario)

    def parse_accuracy(self, text: str) -> dict[str, float]:
        """Every metric of this benchmark found in ``accuracy.txt`` text, read as the checker does."""
        found: dict[str, float] = {}
        metrics = [b.metric for b in self.accuracy + self.accuracy_upper]
        for metric in dict.fromkeys(metrics):
            for line in text.splitlines():
                m = re.match(self.accuracy_regex[metric], line)
                if m:
                    found[metric] = float(m.group(1))
                    break
        return found

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


class LlmRules(_Frozen):
    """One round's LLM benchmarks."""

    round: str
    benchmarks: dict[str, LlmBenchmark]

    def benchmark(self, name: str) -> LlmBenchmark:
        """The benchmark by submission name; a clear error for an unknown one or one out of round."""
        b = self.benchmarks.get(name)
        if b is None:
            raise ConfigError(f"{name!r} is not an LLM benchmark of {self.round}",
                              "known: " + ", ".join(self.benchmarks))
        if not b.in_round:
            raise ConfigError(f"{name} is not a {self.round} benchmark (the checker's model list "
                              "omits it)", f"use {name}.9" if name.endswith("-99") else "")
        return b

    def find(self, name: str) -> LlmBenchmark | None:
        """The benchmark whether in the round or not (to read older results); None if unknown."""
        return self.benchmarks.get(name)


def round_benchmark(rules: Rules, name: str) -> BenchmarkRules | LlmBenchmark | None:
    """A benchmark of ``rules``' round by submission directory or mlharness name: the round's
    table (``rules/<round>.toml``) first, then its LLM benchmarks (``rules/llm_<round>.toml``);
    None when neither counts it (an LLM benchmark the round's checker omits, a round without
    LLM rules). How the submission code sees both without merging the tables."""
    found = rules.find(name)
    if found is not None or rules.round not in ROUNDS:
        return found
    bench = _load(rules.round).find(name)
    return bench if bench is not None and bench.in_round else None


def load(round_name: str = "v6.1") -> LlmRules:
    """Read ``rules/llm_<round>.toml`` (``v6.1`` or ``6.1``) once; errors name the file and key."""
    name = round_name if round_name.startswith("v") else f"v{round_name}"
    if name not in ROUNDS:
        raise ConfigError(f"no LLM rules for round {round_name!r}", "known: " + ", ".join(ROUNDS))
    return _load(name)


@cache
def _load(name: str) -> LlmRules:
    fname = f"llm_{name}.toml"
    data = tomllib.loads(resources.files("mlharness.rules").joinpath(fname).read_text())
    regex = data.get("accuracy_regex", {})
    try:
        return LlmRules(round=data["round"], benchmarks={
            key: LlmBenchmark(name=key, accuracy_regex=regex, **value)
            for key, value in data["benchmarks"].items()})
    except (ValidationError, KeyError) as exc:
        raise ConfigError(f"rules/{fname} is malformed: {' '.join(str(exc).split())[:300]}",
                          "this file ships with mlharness; reinstall it") from exc
