"""One index row from one run directory: what ``run.json`` holds, flattened for querying.

The run directory is the source of truth; everything here is derived from its ``run.json`` (and
nothing else), so ``mlharness runs reindex`` can always rebuild the same rows.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import mlharness
from mlharness.distribution import Distribution
from mlharness.errors import ConfigError
from mlharness.flags import command_words
from mlharness.loadgen.mllog import LoadGenResult
from mlharness.names import Scenario
from mlharness.record import RunRecord, probe_reason, read_record
from mlharness.rules import endpoints, round_for_seeds, rules_for
from mlharness.spec import RunSpec

#: spec fields that say where or how a run is kept, not what was measured
_NOT_SETTINGS = ("output_dir", "label", "stall_timeout", "cache_dir",
                 "audit_config", "purpose")
#: statuses of a run that ended; anything else is unfinished (crashed, killed, or still running)
FINISHED = ("ok", "failed", "error", "interrupted")
#: the status of a run directory whose run.json cannot be read or holds wrong-typed values
DAMAGED = "damaged"
_SCENARIOS = tuple(Scenario)
#: a token run's (the LLMs') latencies the index keeps: run.json ``result.tokens_ms`` keys
TOKEN_FIELDS = ("ttft_p99_ms", "tpot_p99_ms", "ttft_limit_ms", "tpot_limit_ms")


@dataclass
class RunRow:
    """One run as the index keeps it. ``path`` is relative to the runs folder."""

    path: str
    kind: str  # run | audit | probe
    status: str  # ok | failed | error | interrupted | running
    benchmark: str
    scenario: str
    mode: str
    label: str | None = None
    system: str | None = None
    backend: str | None = None
    precision: str | None = None
    batch_size: int | None = None
    round: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    settings_hash: str = ""
    metric: str | None = None
    unit: str | None = None
    value: float | None = None
    valid: bool | None = None
    verdict: str | None = None
    reasons: list[str] = field(default_factory=list)  # why INVALID, or why the run failed
    accuracy_metric: str | None = None
    accuracy: float | None = None
    accuracy_target: float | None = None
    accuracy_passed: bool | None = None
    #: a token run (the LLM benchmarks): p99 time to first token and per output token, ms, and
    #: the limits it was judged against (Server and Interactive only: None elsewhere)
    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None
    ttft_limit_ms: float | None = None
    tpot_limit_ms: float | None = None
    started: str | None = None
    finished: str | None = None
    duration_s: float | None = None
    versions: dict[str, str] = field(default_factory=dict)
    model_git_commit: str | None = None
    command: str = ""
    pid: int | None = None  # the process running it, while it runs (record.owner_fields)
    host: str | None = None
    pid_start: int | None = None  # when that process started and in which boot (a reused pid
    boot_id: str | None = None  # is another process)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def tokens_ms(self) -> dict[str, float | None]:
        """The token latencies by the names run.json's ``result.tokens_ms`` gives them."""
        return {name: getattr(self, name) for name in TOKEN_FIELDS}

    @property
    def trusted(self) -> bool:
        """Only a run that finished cleanly counts as a result."""
        return self.status == "ok"


def _read(run_dir: Path) -> RunRecord:
    """The typed record of ``run_dir`` through the runner's one reader (ValueError if missing,
    unreadable or not ours)."""
    try:
        return read_record(Path(run_dir))
    except ConfigError as exc:
        raise ValueError(exc.message) from exc


def load_run_json(run_dir: Path) -> dict[str, Any]:
    """The ``run.json`` of ``run_dir`` in its file form (ValueError as in :func:`_read`)."""
    return _read(run_dir).to_dict()


def effective_settings(data: dict[str, Any]) -> dict[str, Any]:
    """What decided the measurement: the spec (minus where it is kept) and LoadGen's
    ``effective_*`` values as it logged them."""
    spec = {k: v for k, v in (data.get("spec") or {}).items() if k not in _NOT_SETTINGS}
    effective = ((data.get("result") or {}).get("effective")) or {}
    out = {"spec": spec, "loadgen": dict(sorted(effective.items())),
           "backend": data.get("backend")}
    decided = (data.get("settings") or {}).get("values")  # the runner's effective settings
    if decided:
        out["effective"] = dict(sorted(decided.items()))
    return out


def settings_hash(settings: dict[str, Any]) -> str:
    text = json.dumps(settings, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_round(result: LoadGenResult | None) -> str | None:
    """The round whose LoadGen seeds the run used (rules tables), if any."""
    eff = result.effective if result is not None else {}
    keys = ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed")
    try:
        seeds = {k: int(eff[f"effective_{k}"]) for k in keys}
    except (KeyError, TypeError, ValueError):
        return None
    return round_for_seeds(seeds)


def kind_of(rel: Path, record: RunRecord) -> str:
    if probe_reason(rel, record):
        return "probe"
    if record.spec.audit_config or str(record.spec.label or "").startswith("TEST"):
        return "audit"
    return "run"


def damaged_row(run_dir: Path, root: Path, reason: str) -> RunRow:
    """The row of a run directory whose run.json cannot be used: benchmark, scenario and mode
    are read from its path (``<benchmark>/<Scenario>-<mode>-<time>``), ``reasons`` says why."""
    rel = Path(run_dir).resolve().relative_to(Path(root).resolve())
    parts = rel.name.split("-")
    scenario = parts[0] if parts[0] in _SCENARIOS else "?"
    mode = parts[1] if len(parts) > 1 and parts[1] in ("performance", "accuracy") else "?"
    kind = "probe" if "_tune" in rel.parts else (
        "audit" if len(parts) > 1 and parts[1].startswith("TEST") else "run")
    benchmark = rel.parent.name if rel.parent.name not in ("", "_tune") else "?"
    return RunRow(path=rel.as_posix(), kind=kind, status=DAMAGED, benchmark=benchmark,
                  scenario=scenario, mode=mode, reasons=[reason])


def row_from_run_dir(run_dir: Path, root: Path) -> RunRow:
    """The index row of ``run_dir`` (ValueError when its run.json is missing, not ours, or
    holds a wrong-typed value: the typed record refuses it)."""
    record = _read(run_dir)
    spec, result, acc = record.spec, record.result, record.accuracy
    data = record.to_dict()  # the file form: what the settings hash and the command are of
    rel = Path(run_dir).resolve().relative_to(Path(root).resolve())
    settings = effective_settings(data)
    backend = record.backend or {}
    return RunRow(
        path=rel.as_posix(), kind=kind_of(rel, record), status=record.status,
        benchmark=record.benchmark or spec.benchmark,
        scenario=str(spec.scenario), mode=str(spec.mode), label=spec.label,
        system=record.system.get("hostname"),
        backend=str(backend.get("name") or spec.backend), precision=str(spec.precision),
        batch_size=_batch_size(record), round=run_round(result), settings=settings,
        settings_hash=settings_hash(settings),
        metric=result.metric if result else None, unit=result.unit if result else None,
        value=result.value if result else None, valid=result.valid if result else None,
        verdict=None if record.status == "running" else record.verdict()[0],  # the one verdict
        reasons=_reasons(record),
        accuracy_metric=acc.metric if acc else None, accuracy=acc.value if acc else None,
        accuracy_target=acc.target if acc else None,
        accuracy_passed=acc.passed if acc else None,
        **token_latencies(result.tokens_ms if result else {}, str(spec.scenario)),
        started=record.started, finished=record.finished, duration_s=record.duration_s,
        versions=dict(record.versions),
        model_git_commit=record.model_git_commit, command=reproduce_command(data["spec"]),
        pid=record.pid, host=record.host, pid_start=record.pid_start, boot_id=record.boot_id,
    )


def token_latencies(tokens: dict[str, float], scenario: str) -> dict[str, float | None]:
    """The TOKEN_FIELDS of a run's ``tokens_ms`` (None for a run without token latencies);
    limits only where they apply (Server, Interactive: elsewhere LoadGen logs its defaults)."""
    limited = (Scenario.parse(scenario) or Scenario.OFFLINE).loadgen == Scenario.SERVER
    return {name: (float(tokens[name]) if name in tokens and (limited or "limit" not in name)
                   else None) for name in TOKEN_FIELDS}


def _reasons(record: RunRecord) -> list[str]:
    message = record.error_message
    return ([str(message)] if message else []) + (record.result.reasons if record.result else [])


def _batch_size(record: RunRecord) -> int | None:
    """The batch size the SUT used (the engine's policy), else the one asked for."""
    used = record.sut.max_batch if record.sut else None
    return used if used is not None else record.spec.batch_size


#: written even at their default: what a person reads first
_ALWAYS = ("benchmark", "scenario", "mode")
#: not repeated: a SUT configuration's targets and engine settings are written out instead (the
#: file may change, the run won't), and the runs go where the person repeating it says
_NOT_REPEATED = ("sut", "output_dir")


def reproduce_command(spec: dict[str, Any]) -> str:
    """The ``mlharness run`` command line that repeats a run with the same settings, built from
    each setting's flag as RunSpec declares it (mlharness.flags)."""
    import shlex

    pinned = {**spec, **{k: v for k, v in (spec.get("sut_conf") or {}).items()
                         if spec.get(k) is None},
              "distribution": Distribution.model_validate(spec.get("distribution") or {})
              .model_dump(mode="json")}
    parts = ["mlharness", "run", *command_words(RunSpec, pinned, _ALWAYS, _NOT_REPEATED)]
    command = " ".join(shlex.quote(p) for p in parts)
    if spec.get("audit_config"):  # an audit's settings come from its audit.config
        command += f"  # {spec.get('label') or 'audit'} run: repeat it with `mlharness compliance`"
    return command


def git_commit_of(path: Path | str | None) -> str | None:
    """The git commit of the repository holding ``path`` (the model, else this package's own
    source), or None when it is not in a git work tree."""
    start = Path(path) if path else Path(mlharness.__file__)
    folder = start if start.is_dir() else start.parent
    try:
        out = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and len(commit) == 40 else None


# ---- results in the endpoints format ---------------------------------------------------------

def marker(run_dir: Path) -> Path:
    """The file whose size and time say a run directory changed: its run.json, or the result
    file of an endpoints report (``performance/result_summary.json``; its ``accuracy/``
    folder: ``accuracy_results.json``)."""
    run_dir = Path(run_dir)
    if (run_dir / "run.json").exists():
        return run_dir / "run.json"
    if run_dir.name == "accuracy" and endpoints.is_report_dir(run_dir.parent):
        return run_dir.parent / endpoints.ACCURACY
    if endpoints.is_report_dir(run_dir):
        return run_dir / endpoints.SUMMARY
    return run_dir / "run.json"


def endpoints_row(run_dir: Path, root: Path) -> RunRow:
    """The row of an endpoints report (the client's, or a result ``submit --format endpoints``
    wrote): its performance (the report folder) or its accuracy (its ``accuracy`` folder), read
    as the checker reads them (``rules.endpoints``). ``valid`` is what the report can say:
    LoadGen's verdict for one mlharness wrote, the latency bound for the rest."""
    run_dir = Path(run_dir)
    accuracy = run_dir.name == "accuracy" and endpoints.is_report_dir(run_dir.parent)
    report = run_dir.parent if accuracy else run_dir
    facts = endpoints.load()
    perf = endpoints.read(report, "performance", facts)
    who = endpoints.identify(report, perf, facts)
    rel = run_dir.resolve().relative_to(Path(root).resolve()).as_posix()
    try:
        bench = rules_for(who.benchmark) if who.benchmark else None
    except ConfigError:
        bench = None
    row = RunRow(path=rel, kind="run", status="ok" if perf.data.get("complete", True) else
                 "failed", benchmark=who.benchmark or "?", scenario=who.scenario,
                 mode="accuracy" if accuracy else "performance", label="endpoints",
                 backend=str((perf.config.get("mlharness") or {}).get("backend") or "endpoints")
                 if isinstance(perf.config.get("mlharness"), dict) else "endpoints",
                 started=who.started, settings={"endpoints": {
                     k: perf.config.get(k) for k in ("type", "model_params", "settings")}},
                 reasons=list(perf.problems))
    row.settings_hash = settings_hash(row.settings)
    if accuracy:
        acc = endpoints.read(report, "accuracy", facts)
        score = acc.scores[0] if acc.scores else None
        value = score if isinstance(score, (int, float)) and not isinstance(score, bool) else None
        if bench is not None:
            target = bench.accuracy_for(who.scenario)[0]
            row.accuracy_metric, row.accuracy_target = target.metric, target.value
            row.accuracy_passed = value >= target.value if value is not None else None
        row.accuracy = value
        row.verdict = {True: "PASS", False: "FAIL", None: "DONE"}[row.accuracy_passed]
        return row
    checked = endpoints.checked_scenario(str(perf.values.get("effective_scenario", "")),
                                         who.scenario)
    field = ((bench.result_fields.get(checked) if bench else None)
             or facts.result_field(checked) or "")
    value = perf.values.get(field)
    row.metric = field or None
    row.unit = ("tokens/s" if "tokens" in field else
                "samples/s" if checked.lower() == "offline" else "completed samples/s")
    row.value = float(value) if isinstance(value, (int, float)) else None
    mlh = perf.data.get("mlharness") if isinstance(perf.data.get("mlharness"), dict) else None
    limit = bench.latency_limit(who.scenario) if bench is not None else None
    p99 = perf.values.get("result_99.00_percentile_latency_ns")
    if mlh and mlh.get("result_validity"):
        row.valid = mlh["result_validity"] == "VALID"
    elif limit is not None and isinstance(p99, (int, float)):
        row.valid = p99 <= limit
        if not row.valid:
            row.reasons.append(f"p99 latency {p99 / 1e6:,.0f} ms over the {limit / 1e6:,.0f} ms "
                               f"bound of {who.scenario}")
    row.verdict = None if row.valid is None else ("VALID" if row.valid else "INVALID")
    return row
