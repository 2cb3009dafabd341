"""What `compare` and `report` accept, turned into table entries: run directories, runs folders
(through the result index), submission trees and published-results CSV files.

The CSV layout is the one MLCommons publishes (the submission checker's ``summary.csv``, as in
``mlcommons/inference_results_v4.1: closed/GigaComputing/summary.csv``): Organization,
Availability, Division, SystemType, SystemName, Platform, Model, MlperfModel, Scenario, Result,
Accuracy, …, version, …, Units. The results-site export spells some columns differently
("System Name", "Submitter", "System"); both are accepted.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable

from mlharness import rules
from mlharness.errors import ConfigError
from mlharness.loadgen.mllog import parse_run_logs
from mlharness.report.table import TOKENS_UNIT, Entry, TokenLatencies
from mlharness.rules import ROUNDS
from mlharness.rules import endpoints
from mlharness.store import INDEX_NAME, IndexedRun, open_store, runs_root_of
from mlharness.store.row import endpoints_row

#: group-by keys for runs: run row field (or settings.spec key)
RUN_KEYS = ("system", "round", "backend", "precision", "batch_size")


def harness_name(model: str) -> str:
    """The mlharness benchmark a submission's model directory or a results CSV's model names
    (``resnet`` -> ``resnet50``), as the rules of any round know it; else ``model`` itself."""
    for round_name in ROUNDS:
        bench = rules.load(round_name).find(model)
        if bench is not None:
            return bench.harness
    return model

_CSV_COLUMNS = {  # our name -> accepted header spellings
    "organization": ("Organization", "Submitter"),
    "system": ("SystemName", "System Name", "System", "Platform"),
    "model": ("Model", "MlperfModel"),
    "scenario": ("Scenario",),
    "result": ("Result", "Performance_Result"),
    "units": ("Units", "Performance_Units"),
    "version": ("version", "Version"),
    "errors": ("errors",),
}
_SCENARIOS = {"singlestream": "SingleStream", "single stream": "SingleStream",
              "multistream": "MultiStream", "multi stream": "MultiStream",
              "server": "Server", "offline": "Offline", "interactive": "Interactive"}


def summary_unit(unit: str | None) -> str:
    """The checker's unit of a result whose unit mlharness names ``unit`` (run rows, parsed
    logs): ``Tokens/s`` for an LLM's tokens/s, else "" (the scenario's official unit)."""
    return TOKENS_UNIT if unit and "tokens" in unit else ""


def csv_unit(units: str) -> str:
    """The unit a results CSV gives a row (its Units column), when it is the LLMs' tokens/s;
    else "" (the scenario's official unit)."""
    return TOKENS_UNIT if units.strip().lower().replace(" ", "") == "tokens/s" else ""


@dataclass
class Source:
    """One argument of `compare`/`report`, read."""

    path: Path
    kind: str  # run | runs | submission | csv
    label: str
    runs: list[IndexedRun] = field(default_factory=list)  # index rows (run, runs)
    entries: list[Entry] = field(default_factory=list)  # submission, csv
    run_root: Path | None = None


def read_source(path: Path) -> Source:
    path = Path(path)
    if path.is_file() and path.suffix.lower() == ".csv":
        return Source(path, "csv", path.stem, entries=csv_entries(path))
    if not path.exists():
        raise ConfigError(f"not found: {path}",
                          hint="give run directories, a runs folder, a submission tree or a CSV")
    if not path.is_dir():
        raise ConfigError(f"{path} is not a directory or a .csv file",
                          hint="give run directories, a runs folder, a submission tree or a CSV")
    if _submission_results(path):
        return Source(path, "submission", path.name or str(path),
                      entries=submission_entries(path))
    root, under = _runs_root(path)

    with open_store(root) as store:
        rows = store.query(kinds=("run",), under=under)
    kind = "run" if (path / "run.json").is_file() else "runs"
    if not rows:
        raise ConfigError(f"no runs found in {path}",
                          hint="run something first (mlharness demo) or check the path")
    return Source(path, kind, path.name if kind == "run" else str(path), runs=rows, run_root=root)


def _runs_root(path: Path) -> tuple[Path, str | None]:
    """The runs folder holding ``path`` (the nearest parent with an index, else ``path`` itself,
    or the run's grandparent for a single run directory) and ``path`` relative to it."""
    path = path.resolve()
    for parent in (path, *path.parents):
        if (parent / INDEX_NAME).is_file():
            rel = path.relative_to(parent).as_posix()
            return parent, None if rel == "." else rel
    if (path / "run.json").is_file():
        root = runs_root_of(path)
        return root, path.relative_to(root).as_posix()
    if any(path.glob("*/run.json")):  # a benchmark folder: <runs>/<benchmark>/<run>
        return path.parent, path.name
    return path, None


def run_entries(rows: list[IndexedRun], group_of: Callable[[IndexedRun], str]) -> list[Entry]:
    """Performance results of finished runs, each with the accuracy verdict of the latest
    accuracy run in the same group (same scenario if there is one, else same benchmark)."""
    acc: dict[tuple, tuple[str, bool | None]] = {}
    for r in rows:
        if r.state == "ok" and r.mode == "accuracy":
            g = group_of(r)
            for key in ((g, r.benchmark, r.scenario), (g, r.benchmark, None)):
                if key not in acc or acc[key][0] <= (r.started or ""):
                    acc[key] = (r.started or "", r.accuracy_passed)
    out = []
    for r in rows:
        if r.state != "ok" or r.mode != "performance" or r.value is None:
            continue
        g = group_of(r)
        seen = acc.get((g, r.benchmark, r.scenario)) or acc.get((g, r.benchmark, None))
        out.append(Entry(group=g, benchmark=r.benchmark, scenario=r.scenario,
                         value=r.value, valid=None if r.valid is None else bool(r.valid),
                         source=r.path,
                         accuracy_ok=seen[1] if seen else None, when=r.started or "",
                         why="; ".join(r.reasons), settings=r.settings,
                         settings_hash=r.settings_hash, unit=summary_unit(r.unit),
                         tokens=TokenLatencies.of(r.tokens_ms)))
    return out


#: the run row fields ``--by`` can name directly (any other name is a ``settings.spec`` key)
_ROW_KEYS = frozenset(f.name for f in fields(IndexedRun)) - {"settings"}


def run_key(row: IndexedRun, by: str) -> str:
    """The group label of a run row for ``--by``."""
    if by in _ROW_KEYS:
        value = getattr(row, by)
    else:
        value = (row.settings.get("spec") or {}).get(by)
    if value is None:
        value = "default" if by == "batch_size" else "unknown"
    return f"{by}={value}"


def _submission_results(path: Path) -> list[Path]:
    """``results/<system>`` folders of a submission tree given at any level above them."""
    found = []
    for results in [path / "results", *path.glob("*/results"), *path.glob("*/*/results")]:
        if results.is_dir():
            found += [d for d in sorted(results.iterdir()) if d.is_dir()]
    return found


def submission_entries(path: Path) -> list[Entry]:
    """One entry per ``results/<system>/<benchmark>/<scenario>/performance/run_1`` (LoadGen's
    logs) and per scenario directory in the endpoints format (``rules.endpoints``)."""
    out = []
    for system_dir in _submission_results(path):
        submitter = system_dir.parent.parent.name
        division = system_dir.parent.parent.parent.name
        for run_1 in sorted(system_dir.glob("*/*/performance/run_1")):
            scen_dir = run_1.parent.parent
            if not (run_1 / "mlperf_log_detail.txt").is_file():
                continue
            try:
                result = parse_run_logs(run_1)
            except (ValueError, TypeError, KeyError) as exc:
                raise ConfigError(f"{run_1 / 'mlperf_log_detail.txt'}: unreadable result "
                                  f"({exc})", hint="the log is damaged: copy it again as "
                                  "LoadGen wrote it, or submit the run again") from None
            acc_ok = None
            acc_txt = scen_dir / "accuracy" / "accuracy.txt"
            bench = rules.load(rules.DEFAULT_ROUND).find(scen_dir.parent.name)
            # the open division has no accuracy threshold: nothing to miss
            if acc_txt.is_file() and bench is not None and division != "open":
                value = bench.accuracy_value(acc_txt.read_text(errors="replace"))
                acc_ok = value is not None and value >= bench.accuracy_target
            out.append(Entry(group=f"{submitter}/{system_dir.name}",
                             benchmark=harness_name(scen_dir.parent.name),
                             scenario=scen_dir.name, value=result.value, valid=result.valid,
                             source=str(run_1), accuracy_ok=acc_ok,
                             why="; ".join(result.reasons), unit=summary_unit(result.unit),
                             tokens=_limited(TokenLatencies.of(result.tokens_ms),
                                             scen_dir.name)))
        for scen_dir in sorted(system_dir.glob("*/*")):  # results in the endpoints format
            if not endpoints.is_endpoints_dir(scen_dir) or not endpoints.is_report_dir(scen_dir):
                continue
            perf = endpoints_row(scen_dir, path)
            acc = endpoints_row(scen_dir / "accuracy", path) if (
                scen_dir / endpoints.ACCURACY).is_file() else None
            out.append(Entry(group=f"{submitter}/{system_dir.name}",
                             benchmark=harness_name(scen_dir.parent.name),
                             scenario=scen_dir.name, value=perf.value, valid=perf.valid,
                             source=str(scen_dir), why="; ".join(perf.reasons),
                             accuracy_ok=acc.accuracy_passed if acc and division != "open"
                             else None, unit=summary_unit(perf.unit)))
    return out


#: the largest results CSV read (MLCommons' whole-round tables are a few MB)
MAX_CSV_BYTES = 64 * 1024 * 1024


def csv_entries(path: Path) -> list[Entry]:
    """Rows of a published-results CSV; the group is "<Organization> <System> (<version>)".
    ConfigError (one line) for a file that is too large, not UTF-8 or not CSV."""
    size = path.stat().st_size
    if size > MAX_CSV_BYTES:
        raise ConfigError(f"{path} is {size / 2**20:,.0f} MiB: too large for a results table "
                          f"(at most {MAX_CSV_BYTES // 2**20} MiB)",
                          hint="give the summary.csv of a round or a submitter, not a dump")
    try:
        return _csv_entries(path)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 (byte {exc.start})",
                          hint="save it as UTF-8, as MLCommons publishes its results") from None
    except csv.Error as exc:
        raise ConfigError(f"{path} is not a readable CSV file ({exc})",
                          hint="expected MLCommons' results layout: Organization, SystemName, "
                               "Model, Scenario, Result, Units, …") from None


def _csv_entries(path: Path) -> list[Entry]:
    with path.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        cols = {k: next((h for h in names if h in header), None) for k, names in _CSV_COLUMNS.items()}
        missing = [names[0] for k, names in _CSV_COLUMNS.items()
                   if cols[k] is None and k in ("system", "model", "scenario", "result")]
        if missing:
            raise ConfigError(f"{path} lacks the column(s) {', '.join(missing)}",
                              hint="expected MLCommons' results layout: Organization, "
                                   "SystemName, Model, Scenario, Result, Units, …")
        out = []
        for line, row in enumerate(reader, start=2):
            get = lambda k: (row.get(cols[k]) or "").strip() if cols[k] else ""  # noqa: E731, B023
            scenario = _SCENARIOS.get(get("scenario").lower())
            if scenario is None:
                continue
            try:
                value = float(get("result").replace(",", ""))
            except ValueError:
                value = None
            model = get("model").lower()
            group = " ".join(p for p in (get("organization"), get("system")) if p)
            if get("version"):
                group += f" ({get('version')})"
            errors = get("errors")
            out.append(Entry(group=group, benchmark=harness_name(model),
                             scenario=scenario, value=value,
                             valid=False if errors not in ("", "0", "False") else None,
                             source=f"{path.name}:{line}", unit=csv_unit(get("units"))))
    return out


def _limited(tokens: TokenLatencies | None, scenario: str) -> TokenLatencies | None:
    """``tokens`` with limits only where they apply (Server, Interactive: elsewhere LoadGen
    logs its defaults)."""
    if tokens is not None and scenario not in ("Server", "Interactive"):
        tokens.ttft_limit_ms = tokens.tpot_limit_ms = None
    return tokens
