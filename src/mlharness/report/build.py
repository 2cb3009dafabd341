"""From `compare`/`report` arguments to a Comparison (and the notes that explain its marks)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from mlharness.report.names import check_benchmark, check_scenario
from mlharness.report.sources import Source, read_source, run_entries, run_key
from mlharness.report.table import Comparison, Entry, compare
from mlharness.store import IndexedRun


def entries_of(sources: list[Source], by: str | None) -> list[Entry]:
    """Entries of every source. Runs are grouped by ``by``; without it each source is a group,
    except a single runs folder, where each run is its own group."""
    out: list[Entry] = []
    per_run = by is None and len(sources) == 1 and sources[0].kind == "runs"
    for src in sources:
        if src.runs:
            group: Callable[[IndexedRun], str]
            if by:
                group = lambda r: run_key(r, by)  # noqa: E731
            elif per_run:
                group = lambda r: r.path  # noqa: E731
            else:
                group = _always(src.label)
            out += run_entries(src.runs, group)
        out += src.entries
    return out


def build_comparison(paths: list[Path], by: str | None = None, benchmark: str | None = None,
                     scenario: str | None = None,
                     sources: list[Source] | None = None) -> tuple[Comparison, list[str]]:
    check_scenario(scenario)
    sources = sources if sources is not None else [read_source(p) for p in paths]
    every = entries_of(sources, by)
    check_benchmark(benchmark, [e.benchmark for e in every] +
                    [r.benchmark for src in sources for r in src.runs])
    entries = [e for e in every
               if (not benchmark or e.benchmark == benchmark)
               and (not scenario or e.scenario.lower() == scenario.lower())]
    groups = None
    if by:
        groups = sorted({e.group for e in entries}, key=_natural)
    # without --by the rows are not one setting apart by design: a Delta only between results
    # of the same settings (table.compare)
    table = compare(entries, by=by or "group", groups=groups, same_settings=by is None)
    notes = []
    for group in table.groups:
        for col in table.columns:
            cell = table.cells[group].get(col.key)
            if cell is not None and cell.marks:
                why = f": {cell.why}" if cell.why else ""
                notes.append(f"{group} {col.title}: {' and '.join(cell.marks)} "
                             f"({cell.source}){why}")
    return table, notes + left_out_notes(sources, benchmark, scenario)


def left_out_notes(sources: list[Source], benchmark: str | None = None,
                   scenario: str | None = None) -> list[str]:
    """A note for each run that is not used because it did not finish cleanly or its run.json
    is damaged: crashed, failed, interrupted, still running."""
    out = []
    for src in sources:
        for r in src.runs:
            if r.state == "ok" or r.mode == "accuracy":
                continue
            if (benchmark and r.benchmark != benchmark) or (
                    scenario and r.scenario.lower() != scenario.lower()):
                continue
            why = "; ".join(r.reasons)
            out.append(f"left out {r.path}: {r.state.upper()}" + (f" ({why})" if why else ""))
    return out


def _natural(label: str) -> tuple:
    """batch_size=8 before batch_size=32; 'default' last."""
    value = label.split("=", 1)[-1]
    try:
        return (0, float(value), "")
    except ValueError:
        return (1, 0.0, value)


def _always(label: str) -> Callable[[IndexedRun], str]:
    """The group of every run of a source: its label."""
    return lambda _run: label
