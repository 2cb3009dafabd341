"""The comparison table of seed 000: a row per group, a column per benchmark x scenario with the
scenario's official metric, and Delta rows in % against the first group.

Metric and units are the submission checker's (``tools/submission/submission_checker/
constants.py`` RESULT_FIELD_NEW and UNIT_DICT, kept in ``mlharness.loadgen.mllog.METRICS``):
SingleStream and MultiStream report the early-stopping latency in ms (lower is better), Server
completed queries/s and Offline samples/s (higher is better). The LLM benchmarks report tokens/s
(completed tokens/s in Server and Interactive, a scenario of their own; the checker's
``Tokens/s``), their cells with TTFT and TPOT p99 against the limits. A result that is INVALID,
or whose accuracy run missed the target, is marked and never compared.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from mlharness.loadgen.mllog import METRICS, TOKEN_METRICS
from mlharness.names import Scenario
from mlharness.rules import facts
from mlharness.submission.summary import RESULT
from mlharness.tasks import BENCHMARKS

SCENARIO_ORDER = tuple(Scenario)
SCENARIO_TITLE = {"SingleStream": "Single Stream", "MultiStream": "Multi Stream",
                  "Server": "Server", "Offline": "Offline", "Interactive": "Interactive"}
#: the checker's unit of a token run's throughput (its SPECIAL_UNIT_DICT)
TOKENS_UNIT = TOKEN_METRICS["Offline"].summary_unit
#: each benchmark's title, in the order columns take (the rules' [tasks], then the demo)
BENCHMARK_TITLE = {**{name: e.title for name, e in BENCHMARKS.items() if name != "demo"},
                   "demo": BENCHMARKS["demo"].title}


@dataclass
class Entry:
    """One performance result placed in the table (from a run, a submission or a CSV row)."""

    group: str
    benchmark: str
    scenario: str
    value: float | None
    valid: bool | None  # None: not known (e.g. a published row: published means it passed)
    source: str
    accuracy_ok: bool | None = None  # None: no accuracy result seen
    when: str = ""  # ordering among several results of one cell (latest wins)
    why: str = ""  # why INVALID
    #: the run's effective settings and their hash (runs only; None/"" for published results)
    settings: dict[str, Any] | None = field(default=None, repr=False)
    settings_hash: str = ""
    #: the checker's unit of ``value`` ("": the scenario's official one; "Tokens/s": an LLM's)
    unit: str = ""
    tokens: TokenLatencies | None = None  # an LLM run's TTFT/TPOT p99 and limits


@dataclass
class TokenLatencies:
    """An LLM result's p99 time to first token and per output token, ms, with their limits
    (None where no limit applies: Offline, SingleStream)."""

    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None
    ttft_limit_ms: float | None = None
    tpot_limit_ms: float | None = None

    @classmethod
    def of(cls, values: dict[str, Any]) -> TokenLatencies | None:
        """From a mapping holding some of the fields (run.json's ``tokens_ms``, an index row's
        ``tokens_ms``); None when it holds no p99."""
        found = {k: float(values[k]) for k in ("ttft_p99_ms", "tpot_p99_ms", "ttft_limit_ms",
                                               "tpot_limit_ms")
                 if isinstance(values.get(k), (int, float))}
        if "ttft_p99_ms" not in found and "tpot_p99_ms" not in found:
            return None
        return cls(**found)

    def text(self) -> str:
        """``TTFT p99 20.4/500 ms, TPOT p99 5.02/30 ms`` (p99 / limit)."""
        parts = []
        for name, p99, limit in (("TTFT", self.ttft_p99_ms, self.ttft_limit_ms),
                                 ("TPOT", self.tpot_p99_ms, self.tpot_limit_ms)):
            if p99 is not None:
                parts.append(f"{name} p99 {p99:,.4g}" + (f"/{limit:,.0f}" if limit else "")
                             + " ms")
        return ", ".join(parts)


@dataclass
class Column:
    benchmark: str
    scenario: str
    unit_name: str = ""  # "": the scenario's official unit

    @property
    def key(self) -> str:
        return f"{self.benchmark}/{self.scenario}"

    @property
    def unit(self) -> str:
        return self.unit_name or official_unit(self.scenario, self.benchmark)

    @property
    def lower_is_better(self) -> bool:
        return Scenario(self.scenario).latency_metric

    @property
    def title(self) -> str:
        name = BENCHMARK_TITLE.get(self.benchmark, self.benchmark)
        return f"{name} {SCENARIO_TITLE[self.scenario]} ({self.unit})"


@dataclass
class Cell:
    value: float | None
    valid: bool | None
    accuracy_ok: bool | None
    source: str
    results: int = 1  # how many results the group had for this column
    why: str = ""
    settings: dict[str, Any] | None = field(default=None, repr=False)
    settings_hash: str = ""
    unit: str = ""
    tokens: TokenLatencies | None = None

    @property
    def comparable(self) -> bool:
        return self.value is not None and self.valid is not False and self.accuracy_ok is not False

    @property
    def marks(self) -> list[str]:
        out = []
        if self.valid is False:
            out.append("INVALID")
        if self.accuracy_ok is False:
            out.append("ACCURACY MISS")
        return out


@dataclass
class Delta:
    percent: float | None
    better: bool | None  # None: equal, or not compared
    why: str = ""  # why not compared
    base: str = ""  # the row compared against, when it is not the column's first (same settings)


@dataclass
class Comparison:
    by: str
    groups: list[str]
    columns: list[Column]
    cells: dict[str, dict[str, Cell]] = field(default_factory=dict)  # group -> column key -> cell
    #: (group, first group, column key -> Delta against the column's first group with a result)
    deltas: list[tuple[str, str, dict[str, Delta]]] = field(default_factory=list)

    @property
    def same_settings_only(self) -> bool:
        """Deltas were limited to results of the same settings (no --by, runs with settings)."""
        return self.by == "group" and any(c.settings_hash for row in self.cells.values()
                                          for c in row.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "by": self.by, "groups": self.groups,
            "columns": [{"key": c.key, "benchmark": c.benchmark, "scenario": c.scenario,
                         "unit": c.unit, "lower_is_better": c.lower_is_better, "title": c.title}
                        for c in self.columns],
            "cells": {g: {k: {**{n: v for n, v in asdict(c).items() if n != "settings"},
                              "marks": c.marks} for k, c in row.items()}
                      for g, row in self.cells.items()},
            "deltas": [{"group": g, "base": b, "values": {k: asdict(d) for k, d in row.items()}}
                       for g, b, row in self.deltas],
        }


#: the legend line of a table without --by
SAME_SETTINGS = ("Without --by, a run is compared only with the first earlier run of the same "
                 "settings (named after 'vs'); a run whose settings no earlier run shares reads "
                 "n/c (settings differ: ...), naming what differs from the column's first run.")


def official_unit(scenario: str, benchmark: str | None = None) -> str:
    """The checker's name for the unit of the scenario's metric (its UNIT_DICT); Interactive,
    an LLM scenario, is in tokens/s (its SPECIAL_UNIT_DICT), but in queries/s for a
    benchmark not judged on tokens (qwen3-vl)."""
    if scenario == Scenario.INTERACTIVE:
        bench = facts(benchmark) if benchmark else None
        if bench is not None and not bench.uses_token_latencies:
            return METRICS[Scenario.SERVER].summary_unit
        return TOKENS_UNIT
    unit = getattr(METRICS[scenario], "summary_unit", None)
    if unit is None:  # the metric table without checker names: the submission summary has them

        unit = RESULT[scenario][2]
    return unit


def compare(entries: list[Entry], by: str = "group", groups: list[str] | None = None,
            same_settings: bool = False) -> Comparison:
    """Build the table. ``groups`` fixes the row order (default: first appearance).

    ``same_settings`` (rows that are not one setting apart by design, i.e. no ``--by``): a
    result with known settings is compared only with the first earlier row whose result has
    the same settings hash; when there is none, its Delta is ``n/c (settings differ: …)``
    naming what differs from the column's first result."""
    order = list(groups or [])
    for e in entries:
        if e.group not in order:
            order.append(e.group)
    cols: dict[str, Column] = {}
    for e in entries:
        if e.scenario in SCENARIO_ORDER:
            col = cols.setdefault(f"{e.benchmark}/{e.scenario}", Column(e.benchmark, e.scenario))
            if e.unit and e.unit != official_unit(e.scenario, e.benchmark):
                col.unit_name = e.unit  # an LLM's tokens/s: the column says so
    columns = sorted(cols.values(), key=lambda c: (
        list(BENCHMARK_TITLE).index(c.benchmark) if c.benchmark in BENCHMARK_TITLE else 99,
        c.benchmark, SCENARIO_ORDER.index(c.scenario)))
    table = Comparison(by=by, groups=order, columns=columns)
    for group in order:
        table.cells[group] = {}
        for col in columns:
            mine = [e for e in entries if e.group == group and e.benchmark == col.benchmark
                    and e.scenario == col.scenario]
            if mine:
                table.cells[group][col.key] = _cell(mine)
    # each column's baseline is the first group with a result in it (the seed's older round)
    bases = {c.key: next((g for g in order if c.key in table.cells[g]), None) for c in columns}
    for group in order[1:]:
        row = {}
        for c in columns:
            base = bases[c.key]
            if base is None or base == group:
                row[c.key] = Delta(None, None)
            elif same_settings:
                row[c.key] = _same_settings_delta(table, order[:order.index(group)], group, c)
            else:
                row[c.key] = _delta(table.cells[base].get(c.key), table.cells[group].get(c.key), c)
        if any(d.percent is not None or d.why not in ("", "no result") for d in row.values()):
            table.deltas.append((group, order[0], row))  # rows with nothing to say are left out
    return table


def _cell(entries: list[Entry]) -> Cell:
    """The latest VALID result of a group (else the latest one, marked)."""
    ranked = sorted(entries, key=lambda e: (e.valid is not False, e.when))
    pick = ranked[-1]
    return Cell(pick.value, pick.valid, pick.accuracy_ok, pick.source, len(entries), pick.why,
                pick.settings, pick.settings_hash, pick.unit, pick.tokens)


def _same_settings_delta(table: Comparison, earlier: list[str], group: str, col: Column
                         ) -> Delta:
    """The Delta of ``group`` against the first earlier row with the same settings; n/c naming
    the differences when no earlier row has them (results without settings: the first row)."""
    this = table.cells[group].get(col.key)
    before = [g for g in earlier if col.key in table.cells[g]]
    if this is None or not before:
        return _delta(table.cells[before[0]][col.key] if before else None, this, col)
    first = table.cells[before[0]][col.key]
    if not this.settings_hash or not first.settings_hash:
        return _delta(first, this, col)
    same = next((g for g in before if table.cells[g][col.key].settings_hash ==
                 this.settings_hash), None)
    if same is None:
        return Delta(None, None, "settings differ: " +
                     settings_diff(first.settings or {}, this.settings or {}))
    d = _delta(table.cells[same][col.key], this, col)
    d.base = same
    return d


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"spec": {"batch_size": 8}}`` -> ``{"spec.batch_size": 8}``."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: value} if prefix else {}


def settings_diff(a: dict[str, Any], b: dict[str, Any], shown: int = 3) -> str:
    """What differs between two runs' settings: ``spec.batch_size 8 → 32; …`` (the first
    ``shown`` differences, then how many more)."""
    fa, fb = _flat(a), _flat(b)
    keys = sorted(k for k in set(fa) | set(fb) if fa.get(k, "unset") != fb.get(k, "unset"))
    keys.sort(key=lambda k: not k.startswith("spec."))  # what was asked for first
    parts = [f"{k} {fa.get(k, 'unset')} → {fb.get(k, 'unset')}" for k in keys[:shown]]
    if len(keys) > shown:
        parts.append(f"{len(keys) - shown} more")
    return "; ".join(parts) or "same values, different hash"


def _delta(base: Cell | None, other: Cell | None, col: Column) -> Delta:
    if base is None or other is None:
        return Delta(None, None, "no result" if (base or other) else "")
    for name, cell in (("baseline", base), ("this", other)):
        if not cell.comparable:
            return Delta(None, None, f"{name} {' and '.join(cell.marks) or 'has no value'}")
    if (base.unit or col.unit) != (other.unit or col.unit):
        return Delta(None, None, f"units differ: {base.unit or col.unit} and "
                                 f"{other.unit or col.unit}")
    if not base.value:
        return Delta(None, None, "baseline is 0")
    pct = (other.value - base.value) / base.value * 100.0  # type: ignore[operator]
    if round(pct, 2) == 0:
        return Delta(0.0, None)
    return Delta(pct, pct < 0 if col.lower_is_better else pct > 0)


def format_value(value: float | None) -> str:
    """As in the seed: thousands separators and two decimals; small latencies keep 3 digits."""
    if value is None:
        return ""
    if abs(value) >= 1 or value == 0:
        return f"{value:,.2f}"
    return f"{value:.3g}"


def cell_text(cell: Cell | None) -> str:
    """The value, its marks, and an LLM result's token latencies: ``1,517.86 (TTFT p99
    20.4/500 ms, TPOT p99 5.02/30 ms)``."""
    if cell is None:
        return ""
    tokens = f"({cell.tokens.text()})" if cell.tokens is not None else ""
    return " ".join(p for p in (format_value(cell.value), *cell.marks, tokens) if p).strip()


def delta_text(delta: Delta) -> str:
    if delta.percent is None:
        return f"n/c ({delta.why})" if delta.why and delta.why != "no result" else ""
    vs = f" vs {delta.base}" if delta.base else ""
    if delta.better is None:
        return f"0%{vs}"
    word = "better" if delta.better else "worse"
    return f"{delta.percent:+.2f}% {word}{vs}"
