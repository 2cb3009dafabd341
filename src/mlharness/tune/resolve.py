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
from mlharness.spec import AUTO, RunSpec
from mlharness.tune.latency import BYTES_PER_QUERY, generated_queries, max_generated_queries
from mlharness.tune.probe import ENGINE_SETTINGS, PointSink, ProgressSink
from mlharness.tune.scenario import Tuned, target_field, tune_scenario
from mlharness.tune.sutconfig import load_sut

Notify = Callable[[str], None]


def _given(spec: RunSpec, name: str, explicit: set[str] | None) -> bool:
    """Was ``name`` set by the user (named in ``explicit``, or else not at its default)?"""
    if explicit is not None:
        return name in explicit
    return getattr(spec, name) != RunSpec.model_fields[name].default


def apply_sut(spec: RunSpec, explicit: Iterable[str] | None = None) -> RunSpec:
    """Fill ``spec``'s target (``sut_conf``) and engine settings from its SUT configuration;
    what the user gave explicitly wins."""
    if not spec.sut:
        return spec
    given = set(explicit) if explicit is not None else None
    entry = load_sut(spec.sut).entry(spec.benchmark, spec.scenario)
    if entry is None:
        return spec
    changes: dict[str, Any] = {"sut_conf": entry.user_conf()}
    for key, setting in entry.settings.items():
        if key in ENGINE_SETTINGS and not _given(spec, key, given):
            changes[key] = setting
    return spec.replace(**changes)


def resolve_targets(spec: RunSpec, *, explicit: Iterable[str] | None = None,
                    progress: ProgressSink | None = None, on_point: PointSink | None = None,
                    notify: Notify | None = None) -> RunSpec:
    """``spec`` with its performance target known (see the module docstring).

    ``explicit``: the fields the user gave (None: those not at their default). Raises ConfigError
    for a --valid run with no target, or when no probe was VALID.
    """
    say = notify or (lambda text: None)
    spec = apply_sut(spec, explicit)
    name = target_field(spec.scenario)
    if spec.mode != "performance":  # accuracy runs every sample once: no target needed
        clear = {n: None for n in ("target_qps", "target_latency") if getattr(spec, n) == AUTO}
        return spec.replace(**clear) if clear else spec
    value = getattr(spec, name)
    if value is None and name in spec.sut_conf:
        value = spec.sut_conf[name]
    if value not in (None, AUTO):
        _refuse_huge_query_set(spec, value)
        return spec
    if value is None and spec.valid:
        flag = "--target-qps" if name == "target_qps" else "--target-latency"
        where = (f"{spec.sut} has no {spec.benchmark} {spec.scenario} entry; "
                 if spec.sut else "")
        raise ConfigError(
            f"{where}no {flag} for this --valid {spec.scenario} run, and a guess would waste "
            "10 minutes",
            hint=f"measure it once: mlharness tune -b {spec.benchmark} -s {spec.scenario} "
                 f"--sut NAME, then run with --sut NAME (or pass {flag} auto)")
    say(f"measuring the {spec.scenario} target with short probe runs in "
        f"{spec.output_dir / '_tune'} …")
    tuned = tune_scenario(spec.replace(**{name: None}), quick=spec.short, progress=progress,
                          on_point=on_point)
    if tuned.target is None:
        raise ConfigError(f"could not measure a {spec.scenario} target: no probe was VALID",
                          hint=_why(tuned))
    say(f"{name.replace('_', ' ')}: {tuned.target:g} ({tuned.method})")
    _refuse_huge_query_set(spec, tuned.target)
    return spec.replace(**{name: tuned.target})


def _refuse_huge_query_set(spec: RunSpec, target: float) -> None:
    """A latency hint so small that LoadGen's up-front query set would not fit in memory."""
    if spec.scenario not in ("SingleStream", "MultiStream"):
        return
    # the run's min duration as LoadGen will see it (mlperf.conf's "*" entries, the --test
    # length, or --min-duration): the one settings decision, before the task is built
    duration = spec.replace(target_latency=None).settings("*").min_duration_ms
    queries = generated_queries(duration, target)
    if queries > max_generated_queries():
        raise ConfigError(
            f"a {duration / 1000:g} s {spec.scenario} run with a {target:g} ms latency hint makes "
            f"LoadGen build about {queries / 1e6:.0f} M queries up front "
            f"(~{queries * BYTES_PER_QUERY / 1e9:.0f} GB, more than half the memory available)",
            hint="this model answers too fast for a run of this length here; use --min-duration "
                 "to shorten it (not valid for submission), or a larger model")


def _why(tuned: Tuned) -> str:
    reasons = [r for p in tuned.points for r in p.reasons]
    return (reasons[-1] if reasons else "see the probe runs") + \
        f"; probes kept in {tuned.points[-1].run_dir if tuned.points else '_tune/'}"
