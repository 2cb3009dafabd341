"""Read a round's TOML rule table (merged over ``common.toml``) into :class:`Rules`."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from mlharness.errors import ConfigError
from mlharness.rules.model import BenchmarkRules, Rules, Test05Rule, normalize_system_type

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


def _benchmark(name: str, data: dict[str, Any], regexes: dict[str, str]) -> BenchmarkRules:
    metric = data["accuracy_metric"]
    latency = data.get("server_latency_ns")
    return BenchmarkRules(
        name=name,
        harness=data["harness"],
        loadgen_model=data["loadgen_model"],
        accuracy_metric=metric,
        accuracy_reference=float(data["accuracy_reference"]),
        accuracy_fraction=float(data["accuracy_fraction"]),
        accuracy_regex=regexes[metric],
        dataset_size=int(data["dataset_size"]),
        performance_sample_count=int(data["performance_sample_count"]),
        offline_min_samples_per_query=int(data["offline_min_samples_per_query"]),
        min_queries={k: int(v) for k, v in data.get("min_queries", {}).items()},
        server_latency_ns=int(latency) if latency is not None else None,
        compliance_tests=tuple(data.get("compliance_tests", ())),
        required_scenarios={normalize_system_type(k): tuple(v)
                            for k, v in data.get("required_scenarios", {}).items()},
    )


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


def task_entries() -> dict[str, BenchmarkEntry]:
    """``{benchmark: BenchmarkEntry}`` from ``[tasks]`` in common.toml."""
    return {name: BenchmarkEntry(str(t["factory"]), str(t.get("summary", "")),
                                 str(t.get("title", name)), t.get("calibration"))
            for name, t in _read("common.toml").get("tasks", {}).items()}


def calibration_sets() -> dict[str, dict[str, dict[str, str]]]:
    """``{set: {option: {file, source, kind}}}`` from ``[calibration]`` in common.toml."""
    return _read("common.toml").get("calibration", {})


def facts(harness_name: str) -> BenchmarkRules | None:
    """What the newest round describing ``harness_name`` (``resnet50``, ``retinanet``, …) says
    of it: accuracy target, sample counts. Tasks read their round facts here."""
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
    regexes = data["accuracy_regex"]
    benchmarks = {name: _benchmark(name, b, regexes) for name, b in data["benchmarks"].items()}
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
        hash_regex=regexes["hash"],
        test05_seeds={k: int(v) for k, v in data.get("test05_seeds", {}).items()},
        mlperf_conf={k: str(v) for k, v in data.get("mlperf_conf", {}).items()},
        checker_script=str(data.get("checker_script", "")),
        test05=_test05(data.get("test05")),
        raw=data,
    )
