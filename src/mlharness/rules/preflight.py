"""Preflight: will a run described by a RunSpec count for a round? Checked before a long run.

Returns problems instead of raising, so the runner (or the user) decides whether to refuse.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol

from mlharness.errors import ConfigError
from mlharness.loadgen import installed
from mlharness.loadgen.settings import EffectiveSettings
from mlharness.names import Mode, Scenario
from mlharness.rules.loader import ROUNDS, load
from mlharness.rules.model import BenchmarkRules, Rules
from mlharness.rules.problems import Problem


class PlannedRun(Protocol):
    """What the preflight reads of a run: a ``mlharness.spec.RunSpec`` (a layer above)."""

    benchmark: str
    scenario: Scenario
    mode: Mode
    round: str | None
    max_samples: int | None
    audit_config: Path | None

    @property
    def short(self) -> bool: ...

    def settings(self, loadgen_model: str) -> EffectiveSettings: ...


def round_for_seeds(seeds: dict[str, int]) -> str | None:
    """The round whose seeds these are, if any."""
    for name in ROUNDS:
        if load(name).seeds == seeds:
            return name
    return None


def _install_hint(rules: Rules) -> str:
    if rules.loadgen_version:
        return (f"install the LoadGen release of {rules.round}: "
                f"pip install mlcommons-loadgen=={rules.loadgen_version}")
    return f"install the LoadGen release of {rules.round}"


def seed_problems(rules: Rules, found: dict[str, int] | None) -> list[Problem]:
    """Do these LoadGen seeds (None: unreadable) equal the round's?"""
    version = installed.loadgen_version() or "unknown"
    if found is None:
        return [Problem(
            "seeds-unknown", "cannot read the seeds compiled into the installed LoadGen",
            meaning="every run's seeds must equal the round's; without them we cannot tell",
            fix=_install_hint(rules))]
    if found == rules.seeds:
        return []
    other = round_for_seeds(found)
    where = f"; they are the {other} seeds" if other else ""
    return [Problem(
        "wrong-seeds",
        f"the installed LoadGen {version} uses seeds that are not the {rules.round} seeds{where}",
        meaning=f"the checker rejects every log whose qsl/sample-index/schedule seeds differ from "
        f"{rules.round}'s (seeds come only from the mlperf.conf compiled into LoadGen)",
        fix=(f"run with --round {rules.round} (its seeds are then set from code), or lay out "
             f"and check with --round {other} (the installed LoadGen's round)" if other else
             f"run with --round {rules.round} (its seeds are then set from code)"))]


def _performance(spec: PlannedRun, eff: EffectiveSettings, bench: BenchmarkRules, rules: Rules,
                 division: str) -> list[Problem]:
    out: list[Problem] = []
    duration = eff.min_duration_ms
    if spec.short:
        out.append(Problem(
            "test-duration",
            f"--test run: min_duration {int(duration)} ms, {rules.round} needs {rules.min_duration_ms} ms",
            meaning="test runs are for practice; the checker refuses results shorter than 600 s",
            fix="re-run with --valid (600 s per performance run)"))
    elif duration < rules.min_duration_ms:
        out.append(Problem(
            "min-duration",
            f"min_duration {int(duration)} ms is below the rule ({rules.min_duration_ms} ms)",
            meaning="the checker requires effective_min_duration_ms >= 600000",
            fix="drop --min-duration (or set it to 600000) and run with --valid"))
    psc = int(eff.values.get("performance_sample_count_override") or 0)
    if psc and psc < bench.performance_sample_count:
        out.append(Problem(
            "performance-sample-count",
            f"performance_sample_count {psc} < {bench.performance_sample_count} required for {bench.name}",
            meaning="LoadGen must be able to pick from at least that many samples held in memory",
            fix="drop --performance-sample-count (mlperf.conf sets the right value)"))
    max_q = int(eff.values.get("max_query_count") or 0)
    if max_q:
        out.append(Problem(
            "max-query-count", f"max_query_count {max_q} caps the run",
            meaning="a capped run can stop before the minimum duration or query count",
            fix="drop --max-query-count"))
    if spec.scenario == "Offline" and division == "closed" and not spec.short:
        spq = eff.samples_per_query  # a --test run is refused above already
        if spq < bench.offline_min_samples_per_query:
            out.append(Problem(
                "offline-samples-per-query",
                f"Offline would issue about {spq} samples, closed {bench.name} needs "
                f">= {bench.offline_min_samples_per_query}",
                meaning="closed Offline runs must issue at least the round's minimum in their query",
                fix="drop --min-query-count (mlperf.conf sets it)"))
    if spec.scenario == "Server" and division == "closed" and bench.server_latency_ns:
        latency = eff.values.get("target_latency")
        if latency is not None and float(latency) * 1e6 > bench.server_latency_ns:
            out.append(Problem(
                "server-latency",
                f"Server latency bound {latency:g} ms exceeds {bench.name}'s "
                f"{bench.server_latency_ns / 1e6:g} ms",
                meaning="closed Server results must meet the round's latency constraint",
                fix="drop --server-latency (or use the open division)"))
    return out


#: settings of a round's mlperf.conf that a run must reach (``at least``) or equal
_ROUND_MINIMUMS = {"min_query_count": "--min-query-count", "min_duration": "--min-duration"}
_ROUND_EQUAL = ("samples_per_query", "target_latency_percentile")


def round_conf_value(rules: Rules, model: str, scenario: str, key: str) -> str | None:
    """``key`` in the round's mlperf.conf lines, looked up as LoadGen does (model.scenario,
    *.scenario, model.*, *.*)."""
    for m, s in ((model, scenario), ("*", scenario), (model, "*"), ("*", "*")):
        value = rules.mlperf_conf.get(f"{m}.{s}.{key}")
        if value is not None:
            return value
    return None


def round_conf_problems(spec: PlannedRun, eff: EffectiveSettings, bench: BenchmarkRules,
                        rules: Rules) -> list[Problem]:
    """Where a --valid run would differ from the round's own mlperf.conf (rounds before v5.0,
    whose mlperf.conf is not the one compiled into LoadGen 6.0.17): named, with the flag that
    sets the round's value, never changed silently."""
    out: list[Problem] = []
    if spec.short or not rules.mlperf_conf:
        return out
    for key in (*_ROUND_MINIMUMS, *_ROUND_EQUAL):
        want, have = round_conf_value(rules, bench.loadgen_model, str(spec.scenario), key), \
            eff.values.get(key)
        if want is None or have is None:
            continue
        short = float(have) < float(want) if key in _ROUND_MINIMUMS else float(have) != float(want)
        if short:
            flag = _ROUND_MINIMUMS.get(key, f"--set {key}=")
            sep = "" if flag.endswith("=") else " "
            out.append(Problem(
                "round-setting", f"{key} would be {have:g}, {rules.round}'s mlperf.conf sets "
                f"{want}", meaning=f"{rules.round} runs used that round's mlperf.conf; the "
                "installed LoadGen compiles in another", fix=f"pass {flag}{sep}{want}"))
    return out


def _accuracy(spec: PlannedRun, eff: EffectiveSettings, bench: BenchmarkRules,
              dataset_size: int | None) -> list[Problem]:
    override = int(eff.values.get("accuracy_sample_count_override") or 0)
    covered = override or spec.max_samples or dataset_size
    if covered is not None and int(covered) != bench.dataset_size:
        return [Problem(
            "accuracy-coverage",
            f"the accuracy run would cover {int(covered)} samples, {bench.name} needs all "
            f"{bench.dataset_size}",
            meaning="the checker compares effective_accuracy_sample_count with the dataset size",
            fix="drop --max-samples and point --dataset at the complete validation set")]
    return []


def preflight(
    spec: PlannedRun,
    rules: Rules | None = None,
    division: str = "closed",
    dataset_size: int | None = None,
    seeds: Callable[[], dict[str, int] | None] | None = None,
) -> list[Problem]:
    """Problems that would keep a run of ``spec`` from counting for ``rules`` (default: the
    newest round, ``rules.DEFAULT_ROUND``).

    ``dataset_size`` is the QSL total count when the caller knows it (accuracy runs must cover the
    round's full dataset). ``seeds`` overrides reading the installed LoadGen (for tests).
    Compliance runs (``spec.audit_config`` set) are judged like performance runs.
    """
    rules = rules or load()
    try:
        bench = rules.benchmark(spec.benchmark)
    except ConfigError as exc:
        return [Problem("not-a-round-benchmark", exc.message, meaning="", fix=exc.hint)]
    forced = spec.round
    if forced is not None and load(forced).round == rules.round:
        problems = []  # the run sets the round's seeds from code (rules.loadgen_seeds)
    else:
        problems = seed_problems(rules, seeds() if seeds else installed.installed_seeds())
    model = bench.loadgen_model_for(spec.scenario)
    eff = spec.settings(model)  # the same decision user.conf is written from
    if spec.mode == "accuracy":
        problems += _accuracy(spec, eff, bench, dataset_size)
    else:
        problems += _performance(spec, eff, bench, rules, division)
        problems += round_conf_problems(spec, eff, bench, rules)
    return problems
