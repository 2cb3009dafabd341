"""The one place a run's targets come from: given, a SUT configuration, or measured now.

``run``, ``compliance`` and ``demo`` all call :func:`resolve_targets`; it takes a spec and returns
one whose performance target is known. No run starts from a guess:

* a target given (flag or TOML) is used as it is;
* otherwise a SUT configuration (``spec.sut``) supplies it (as ``sut_conf``, recorded in the
  effective settings with the source ``sut-config``), with its engine settings, unless a
  setting was given explicitly;
* otherwise, or for ``auto``, a ``--test`` run measures it first with short probes;
  a ``--valid`` run refuses (measure with ``mlharness tune``, or ask for ``auto``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from mlharness.errors import ConfigError
from mlharness.runner import checked_task
from mlharness.spec import AUTO, RunSpec
from mlharness.loadgen.settings import (MEMORY_SHARE, generated_queries, max_generated_queries,
                                        query_set_error)
from mlharness.tune.latency import FIT_LIMIT, smallest_fitting_hint
from mlharness.tune.probe import ENGINE_SETTINGS, ProgressSink
from mlharness.tune.scenario import Tuned, target_field, tune_scenario
from mlharness.tune.sutconfig import SutEntry, load_sut

Notify = Callable[[str], None]


def _given(spec: RunSpec, name: str, explicit: set[str] | None) -> bool:
    """Was ``name`` set by the user (named in ``explicit``, or else not at its default)?"""
    if explicit is not None:
        return name in explicit
    return getattr(spec, name) != RunSpec.model_fields[name].default


def sut_entry(spec: RunSpec) -> SutEntry | None:
    """``spec``'s benchmark x scenario entry in its SUT configuration, if it names one."""
    return load_sut(spec.sut).entry(spec.benchmark, spec.scenario) if spec.sut else None


def apply_sut(spec: RunSpec, explicit: Iterable[str] | None = None,
              entry: SutEntry | None = None) -> RunSpec:
    """Fill ``spec``'s target (``sut_conf``) and engine settings from its SUT configuration
    (``entry``, default: looked up); what the user gave explicitly wins."""
    given = set(explicit) if explicit is not None else None
    entry = entry or sut_entry(spec)
    if entry is None:
        return spec
    changes: dict[str, Any] = {"sut_conf": entry.user_conf()}
    for key, setting in entry.settings.items():
        if key in ENGINE_SETTINGS and not _given(spec, key, given):
            changes[key] = setting
    return spec.replace(**changes)


def without_auto(spec: RunSpec) -> RunSpec:
    """``spec`` with its 'auto' targets left out (accuracy runs; checks before measuring)."""
    clear = {n: None for n in ("target_qps", "target_latency") if getattr(spec, n) == AUTO}
    return spec.replace(**clear) if clear else spec


def resolve_targets(spec: RunSpec, *, explicit: Iterable[str] | None = None,
                    progress: ProgressSink | None = None,
                    notify: Notify | None = None) -> RunSpec:
    """``spec`` with its performance target known (see the module docstring).

    ``explicit``: the fields the user gave (None: those not at their default). Raises ConfigError
    for a --valid run with no target, or when no probe was VALID.
    """
    say = notify or (lambda text: None)
    entry = sut_entry(spec)
    spec = apply_sut(spec, explicit, entry)
    name = target_field(spec.scenario)
    if spec.mode != "performance":  # accuracy runs every sample once: no target needed
        return without_auto(spec)
    check_query_count(spec)
    value = getattr(spec, name)
    if value is None and name in spec.sut_conf:
        value = spec.sut_conf[name]
    if value not in (None, AUTO):
        from_sut = getattr(spec, name) is None
        fitted = fit_query_set(spec, value, entry.measured if from_sut and entry else None, say)
        if fitted == value:
            return spec
        if from_sut:
            return spec.replace(sut_conf={**spec.sut_conf, name: fitted})
        return spec.replace(**{name: fitted})
    if value is None and spec.valid:
        flag = "--target-qps" if name == "target_qps" else "--target-latency"
        where = (f"{spec.sut} has no {spec.benchmark} {spec.scenario} entry; "
                 if spec.sut else "")
        raise ConfigError(
            f"{where}no {flag} for this --valid {spec.scenario} run, and a guess would waste "
            "10 minutes",
            hint=f"measure it once: mlharness tune -b {spec.benchmark} -s {spec.scenario} "
                 f"--sut NAME, then run with --sut NAME (or pass {flag} auto)")
    checked_task(spec)  # a bad input is refused now, not by the first probe's worker
    say(f"measuring the {spec.scenario} target with short probe runs in "
        f"{spec.output_dir / '_tune'} …")
    tuned = tune_scenario(spec.replace(**{name: None}), quick=spec.short, progress=progress)
    if tuned.target is None:
        raise ConfigError(f"could not measure a {spec.scenario} target: no probe was VALID",
                          hint=_why(tuned))
    unit = "QPS" if name == "target_qps" else "ms"
    say(f"{name.replace('_', ' ')}: {tuned.target:g} {unit} ({tuned.method})")
    return spec.replace(**{name: fit_query_set(spec, tuned.target, tuned.measured, say),
                           "measured": [*spec.measured, name]})


def fit_query_set(spec: RunSpec, target: float, measured: float | None = None,
                  notify: Notify | None = None) -> float:
    """``target``, or the smallest latency hint whose up-front query set fits in memory.

    LoadGen generates a run's whole query set before the first query (460 bytes a query,
    :mod:`mlharness.tune.latency`); a set larger than MEMORY_SHARE of the memory available now
    is refused. A SingleStream/MultiStream hint may be raised up to the ``measured`` latency x
    FIT_LIMIT: LoadGen generates queries for twice the min duration at the hint, so the run
    still reaches its min duration unless it is more than 2 / FIT_LIMIT x faster than measured.
    """
    # the run's min duration as LoadGen will see it (mlperf.conf's "*" entries, the --test
    # length, or --min-duration): the one settings decision, before the task is built
    duration = spec.replace(target_latency=None, target_qps=None).settings("*").min_duration_ms
    budget = max_generated_queries()
    queries = generated_queries(spec.scenario.loadgen, duration, target)
    if queries <= budget:
        return target
    latency = spec.scenario.latency_metric
    if latency and measured:
        fitting = float(f"{smallest_fitting_hint(duration, budget):.4g}")
        if fitting <= measured * FIT_LIMIT:
            if notify:
                notify(f"latency hint raised from {target:g} to {fitting:g} ms (measured "
                       f"{measured:g} ms) so that LoadGen's {duration / 1000:g} s query set fits "
                       f"in {MEMORY_SHARE:.0%} of the memory available")
            return max(fitting, target)
    what = f"a {target:g} ms latency hint" if latency else f"{target:g} QPS"
    raise query_set_error(
        queries, f"a {duration / 1000:g} s {spec.scenario} run at {what}",
        hint="this model answers too fast for a run of this length here; free memory, use "
             "--min-duration to shorten it (not valid for submission), or a larger model")


def check_query_count(spec: RunSpec) -> None:
    """Refuse a ``--min-query-count`` (or a SUT configuration's) whose queries, all built by
    LoadGen before the first is issued, would not fit in memory (the same budget as targets)."""
    count = spec.min_query_count or spec.sut_conf.get("min_query_count") or 0
    if count > max_generated_queries():
        raise query_set_error(int(count), f"--min-query-count {int(count)}",
                              hint="give a smaller --min-query-count (LoadGen keeps every query "
                                   "of the run in memory)")


def _why(tuned: Tuned) -> str:
    # the last probe's reason; an LLM probe's in words (the token limit it broke)
    reasons = [p.why() if p.tokens else p.reasons[-1] for p in tuned.points if p.reasons]
    why = tuned.note or (reasons[-1] if reasons else "see the probe runs")
    return why + \
        f"; probes kept in {tuned.points[-1].run_dir if tuned.points else '_tune/'}"
