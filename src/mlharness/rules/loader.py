"""Read a round's TOML rule table (merged over ``common.toml``) into :class:`Rules`."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from pydantic import ValidationError

from mlharness.errors import ConfigError
from mlharness.rules.model import BenchmarkRules, Rules, Test05Rule

def _read(name: str) -> dict[str, Any]:
    text = resources.files("mlharness.rules").joinpath(name).read_text()
    return tomllib.loads(text)


def _rounds() -> tuple[str, ...]:
    """Every ``v<major>.<minor>.toml`` shipped in this package, newest first: adding a round is
    adding its file."""
    names = [p.name[:-5] for p in resources.files("mlharness.rules").iterdir()
             if re.fullmatch(r"v\d+\.\d+\.toml", p.name)]
    return tuple(sorted(names, key=lambda n: tuple(int(x) for x in n[1:].split(".")),
                        reverse=True))


#: the rounds mlharness knows (newest first) and the one used when none is named
ROUNDS = _rounds()
DEFAULT_ROUND: str = ROUNDS[0]


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _benchmark(name: str, data: dict[str, Any], regexes: dict[str, str],
               source: str) -> BenchmarkRules:
    """One ``[benchmarks.<name>]`` table as :class:`BenchmarkRules`; a malformed one is a
    one-line error naming the file and the benchmark."""
    metrics = {b.get("metric") for key in ("accuracy", "accuracy_upper")
               for b in data.get(key, ()) if isinstance(b, dict)}
    try:
        return BenchmarkRules.model_validate({**data, "name": name, "accuracy_regex": {
            m: regexes[m] for m in metrics if m in regexes}})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ConfigError(f"rules/{source}: [benchmarks.{name}] {where}: {first['msg']}",
                          "this file ships with mlharness; reinstall it, or fix the table you "
                          "added (docs/architecture.md, \"Add a benchmark\")") from None


def load(round: str = DEFAULT_ROUND) -> Rules:
    """The rules of ``round`` (``v6.1`` … ``v2.1``: ``ROUNDS``; a leading ``v`` is optional)."""
    key = round if round.startswith("v") else f"v{round}"
    if key not in ROUNDS:
        raise ConfigError(f"unknown round {round!r}", hint="choose one of: " + ", ".join(ROUNDS))
    return _load(key)


@dataclass(frozen=True)
class BenchmarkEntry:
    """One benchmark mlharness runs, as ``[tasks.<name>]`` in common.toml describes it."""

    factory: str  # "module:function" taking (name, TaskOptions) and returning a Task
    summary: str
    title: str = ""  # as tables show it; the name itself when empty
    calibration: str | None = None  # its set of official calibration lists
    #: the round benchmark whose rules it runs under (a variant borrows another's: ``rules =
    #: "resnet50"``); None: no MLPerf rules (the demo, a task of your own)
    rules: str | None = None


def task_entries() -> dict[str, BenchmarkEntry]:
    """``{benchmark: BenchmarkEntry}`` from ``[tasks]`` in common.toml; each runs under the
    rules of its own name unless it names another's."""
    return {name: BenchmarkEntry(str(t["factory"]), str(t.get("summary", "")),
                                 str(t.get("title", name)), t.get("calibration"),
                                 str(t.get("rules", name)))
            for name, t in _read("common.toml").get("tasks", {}).items()}


def rules_for(benchmark: str, round: str | None = None) -> BenchmarkRules:
    """The rules ``benchmark`` (a harness or submission name) runs under: ``round``'s when one
    is named (a one-line error when that round has no such benchmark: retired, not yet in it),
    else the newest round's that describes it."""
    if round is not None:
        return load(round).benchmark(benchmark)
    found = facts(benchmark)
    if found is None:
        load(DEFAULT_ROUND).benchmark(benchmark)  # raises, naming what the round has
        raise AssertionError("unreachable")  # pragma: no cover
    return found


def calibration_sets() -> dict[str, dict[str, dict[str, str]]]:
    """``{set: {option: {file, source, kind}}}`` from ``[calibration]`` in common.toml."""
    return _read("common.toml").get("calibration", {})


def facts(harness_name: str) -> BenchmarkRules | None:
    """What the newest round describing ``harness_name`` (``resnet50``, ``retinanet``, …) says
    of it: accuracy target, sample counts; None when no round does."""
    for name in ROUNDS:
        bench = _load(name).find(harness_name)
        if bench is not None:
            return bench
    return None


def _test05(data: dict[str, Any] | None) -> Test05Rule | None:
    if data is None:
        return None
    return Test05Rule(float(data["threshold"]), float(data["wide_threshold"]),
                      bool(data["two_sided"]), tuple(data.get("throughput_scenarios", ())))


@lru_cache(maxsize=None)
def _load(key: str) -> Rules:
    data = _merge(_read("common.toml"), _read(f"{key}.toml"))
    regexes = {k: v for k, v in data["accuracy_regex"].items() if k != "hash"}
    every = {name: _benchmark(name, b, regexes, f"{key}.toml")
             for name, b in data["benchmarks"].items()}
    benchmarks = {name: b for name, b in every.items() if b.in_round}
    return Rules(
        round=data["round"],
        checker_version=data["checker_version"],
        loadgen_version=str(data.get("loadgen_version", "")),
        audit=data.get("audit", {}),
        layout=data["layout"],
        seeds={k: int(v) for k, v in data["seeds"].items()},
        benchmarks=benchmarks,
        retired_benchmarks=tuple(data.get("retired", {}).get("benchmarks", ())),
        retired_tests=tuple(data.get("retired_tests", ())),
        divisions=tuple(data["divisions"]),
        statuses=tuple(data["statuses"]),
        system_types=tuple(data["system_types"]),
        scenarios=tuple(data["scenarios"]),
        min_duration_ms=int(data["min_duration_ms"]),
        max_accuracy_log_bytes=int(data["max_accuracy_log_bytes"]),
        truncate_keep_bytes=int(data["truncate_keep_bytes"]),
        system_required=tuple(data["system"]["required"]),
        system_meaningful=tuple(data["system"]["meaningful"]),
        system_network=tuple(data["system"]["network"]),
        measurements_required=tuple(data["measurements"]["required"]),
        measurements_files=tuple(data["measurements"]["files"]),
        hash_regex=data["accuracy_regex"]["hash"],
        test05_seeds={k: int(v) for k, v in data.get("test05_seeds", {}).items()},
        mlperf_conf={k: str(v) for k, v in data.get("mlperf_conf", {}).items()},
        checker_script=str(data.get("checker_script", "")),
        test05=_test05(data.get("test05")),
        kept={name: b for name, b in every.items() if not b.in_round},
        raw=data,
    )
