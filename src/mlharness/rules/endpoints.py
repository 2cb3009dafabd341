"""The endpoints result format (``rules/endpoints_<round>.toml``) and how the checker reads it.

MLCommons' endpoints client writes a run as ``config.yaml``, ``performance/result_summary.json``
and ``accuracy/accuracy_results.json`` (+ ``audit/audit_<test>.json``); the v6.1 checker reads a
scenario directory in that format when it holds no LoadGen log, for the benchmarks of
``allowed_models``, by finding LoadGen's keys in those files
(``parsers/endpoints_parser.py``). :func:`read` does the same, so our checker, the summary and
the report see an endpoints result as LoadGen-keyed values, exactly what the official checker
sees::

    facts = endpoints.load()
    perf = endpoints.read(scenario_dir, "performance", facts)
    perf.values["result_99.00_percentile_latency_ns"]
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mlharness.errors import ConfigError

ROUNDS = ("v6.1",)
CONFIG_FILES = ("config.yaml", "config.yml")
SUMMARY = Path("performance") / "result_summary.json"
ACCURACY = Path("accuracy") / "accuracy_results.json"
AUDIT_DIR = "audit"
Kind = Literal["performance", "accuracy"]


class DatasetOf(BaseModel):
    """The benchmark (and scenario, where the data set tells it) of an endpoints data set."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    benchmark: str
    scenario: str | None = None


class EndpointsFormat(BaseModel):
    """One round's facts of the format (constants.py ``ENDPOINTS_*``, ``RESULT_FIELD_ENDPOINTS``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    round: str
    allowed_models: tuple[str, ...]
    result_fields: dict[str, str]
    mappings: dict[str, str]
    yaml_fields: dict[str, str]
    json_alt_paths: dict[str, str]
    inferred: dict[str, str]
    audits: dict[str, str]
    datasets: dict[str, DatasetOf] = Field(default_factory=dict)

    def allows(self, benchmark: str) -> bool:
        """Whether the checker accepts ``benchmark`` (its submission directory name) in it."""
        return benchmark in self.allowed_models

    def result_field(self, scenario: str) -> str | None:
        """The LoadGen key of the result of ``scenario`` (Offline, Server, Interactive, ...)."""
        return self.result_fields.get(scenario.lower())


def load(round_name: str = "v6.1") -> EndpointsFormat:
    """``rules/endpoints_<round>.toml``; ConfigError for a round without the format."""
    name = round_name if round_name.startswith("v") else f"v{round_name}"
    if name not in ROUNDS:
        raise ConfigError(f"{round_name} has no endpoints result format",
                          "the checker reads it from v6.1 on; use --format loadgen")
    return _load(name)


@cache
def _load(name: str) -> EndpointsFormat:
    fname = f"endpoints_{name}.toml"
    data = tomllib.loads(resources.files("mlharness.rules").joinpath(fname).read_text())
    try:
        return EndpointsFormat(**data)
    except ValidationError as exc:
        raise ConfigError(f"rules/{fname} is malformed: {' '.join(str(exc).split())[:300]}",
                          "this file ships with mlharness; reinstall it") from exc


def is_endpoints_dir(scenario_dir: Path) -> bool:
    """An endpoints-format scenario directory: a config.yaml and none of LoadGen's detail logs
    where the checker looks for them (what makes the checker read it as endpoints)."""
    return (any((scenario_dir / n).is_file() for n in CONFIG_FILES)
            and not (scenario_dir / "performance" / "run_1" / "mlperf_log_detail.txt").is_file()
            and not (scenario_dir / "accuracy" / "mlperf_log_detail.txt").is_file())


def _nested(data: Any, dotted: str) -> Any:
    """A dot path into nested dicts, the longest matching key at each level first (``99.9``),
    ``50.0`` also finding ``50``; an empty dict or list counts as absent (as the parser)."""
    if not isinstance(data, dict):
        return None
    parts, current, i = dotted.split("."), data, 0
    while i < len(parts):
        if not isinstance(current, dict):
            if parts[i:] == ["0"] and not isinstance(current, list):
                return current
            return None
        for j in range(len(parts), i, -1):
            candidate = ".".join(parts[i:j])
            if candidate in current:
                current, i = current[candidate], j
                break
        else:
            return None
    if isinstance(current, (dict, list)) and not current:
        return None
    return current


@dataclass
class EndpointsLog:
    """One side of an endpoints scenario directory as the checker sees it: LoadGen-keyed
    ``values`` (each key's first value), the files read and the ones missing or unreadable."""

    values: dict[str, Any] = field(default_factory=dict)
    scores: list[Any] = field(default_factory=list)  # accuracy_scores[].score
    problems: list[str] = field(default_factory=list)
    #: the file read (result_summary.json or accuracy_results.json) and config.yaml, as read
    data: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str) -> Any:
        return self.values.get(key)


def read_json(path: Path, log: EndpointsLog) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        log.problems.append(f"{path.name} is missing")
        return {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        log.problems.append(f"{path.name} is not readable JSON ({exc})")
        return {}
    if not isinstance(data, dict):
        log.problems.append(f"{path.name} holds a JSON {type(data).__name__}, not an object")
        return {}
    return data


def _yaml(scenario_dir: Path, log: EndpointsLog) -> dict[str, Any]:
    import yaml  # lazy: pyyaml is read only for endpoints results

    for name in CONFIG_FILES:
        path = scenario_dir / name
        if path.is_file():
            try:
                data = yaml.safe_load(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
                log.problems.append(f"{name} is not readable YAML ({' '.join(str(exc).split())})")
                return {}
            return data if isinstance(data, dict) else {}
    log.problems.append("config.yaml is missing")
    return {}


def accuracy_sample_count(results: dict[str, Any]) -> int | None:
    """Samples the accuracy results cover: the accuracy datasets' ``total_samples`` (else their
    ``response_counts.issued``) summed, as the parser counts them."""
    counts = []
    for entry in results.get("accuracy_scores", []):
        if not isinstance(entry, dict):
            continue
        if entry.get("dataset_type") not in (None, "accuracy"):
            continue
        if entry.get("total_samples") is not None:
            counts.append(int(entry["total_samples"]))
        elif (entry.get("response_counts") or {}).get("issued") is not None:
            counts.append(int(entry["response_counts"]["issued"]))
    return sum(counts) if counts else None


def read(scenario_dir: Path, kind: Kind, facts: EndpointsFormat | None = None) -> EndpointsLog:
    """``kind``'s values of an endpoints scenario directory, found as ``EndpointsParser`` finds
    them: result_summary.json (performance) or accuracy_results.json (accuracy) first, each key
    by its own path then its alternative, then config.yaml by the YAML map then the key's path;
    inferred keys, a QPS from count and duration when none is given, the accuracy scores and
    sample count."""
    facts = facts or load()
    log = EndpointsLog()
    summary = read_json(scenario_dir / SUMMARY, log) if kind == "performance" else {}
    results = read_json(scenario_dir / ACCURACY, log) if kind == "accuracy" else {}
    config = _yaml(scenario_dir, log)
    for key, loadgen_key in facts.mappings.items():
        value = None
        for data in (summary, results):
            value = _nested(data, key)
            if value is None and key in facts.json_alt_paths:
                value = _nested(data, facts.json_alt_paths[key])
            if value is not None:
                break
        if value is None and key in facts.yaml_fields:
            value = _nested(config, facts.yaml_fields[key])
        if value is None:
            value = _nested(config, key)
        if value is not None:
            log.values.setdefault(loadgen_key, value)
    if kind == "accuracy":
        count = accuracy_sample_count(results)
        if count is not None:
            log.values["effective_accuracy_sample_count"] = count
            log.values.setdefault("qsl_reported_total_count", count)
    for key, source in facts.inferred.items():
        if log.values.get(source) is not None:
            log.values.setdefault(key, log.values[source])
    duration, count = log.values.get("generated_query_duration"), log.values.get(
        "generated_query_count")
    scenario = log.values.get("effective_scenario")
    if duration and count and scenario:
        qps_key = ("result_samples_per_second" if str(scenario).lower() == "offline"
                   else "result_completed_samples_per_sec")
        log.values.setdefault(qps_key, count / (duration / 1e9))
    log.scores = [e["score"] for e in results.get("accuracy_scores", [])
                  if isinstance(e, dict) and e.get("score") is not None]
    log.data, log.config = summary or results, config
    return log


def checked_scenario(effective: str, directory: str) -> str:
    """The scenario the checker judges a result as (``map_endpoints_scenario``): SingleStream
    and Interactive by the directory (or the config's type), an ``online`` run as Server,
    ``offline`` as it is (lower case, as the config writes it)."""
    if directory.lower() == "singlestream":
        return "SingleStream"
    if directory.lower() == "interactive" or effective.lower() == "interactive":
        return "Interactive"
    return "Server" if effective.lower() == "online" else effective


@dataclass
class Identity:
    """What an endpoints report is a result of: benchmark (None: not recognised), scenario
    (Offline, Server, Interactive) and when it ran."""

    benchmark: str | None
    scenario: str
    started: str | None = None


def identify(report_dir: Path, log: EndpointsLog, facts: EndpointsFormat | None = None
             ) -> Identity:
    """The benchmark and scenario of a report: an mlharness-written config says them; one the
    endpoints client wrote is told by its data sets (``datasets``) and its type."""
    facts = facts or load()
    config = log.config
    section = config.get("mlharness")
    ours: dict[str, Any] = section if isinstance(section, dict) else {}
    kind = str(config.get("type", "")).lower()
    scenario = {"offline": "Offline", "online": "Server"}.get(kind, kind.title() or "?")
    started = log.values.get("test_datetime")
    started = started if isinstance(started, str) and started else None
    if ours.get("benchmark"):
        return Identity(str(ours["benchmark"]), str(ours.get("scenario") or scenario), started)
    for entry in config.get("datasets") or []:
        name = str((entry or {}).get("name", "")).split("::")[0]
        found = facts.datasets.get(name)
        if found is not None:
            return Identity(found.benchmark, found.scenario or scenario, started)
    return Identity(None, scenario, started)


def is_report_dir(path: Path) -> bool:
    """A folder the endpoints client (or ``submit --format endpoints``) wrote a result into:
    config.yaml and performance/result_summary.json, no run.json."""
    return (any((path / n).is_file() for n in CONFIG_FILES) and (path / SUMMARY).is_file()
            and not (path / "run.json").exists())
