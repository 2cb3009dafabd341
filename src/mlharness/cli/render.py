"""Shared terminal rendering: consoles, the live progress display, result tables.

Text from users, files and remote nodes (paths, names, error messages) is escaped before rich
sees it (``rich.markup.escape``), so ``[red]`` or ``[/]`` in it shows literally. Everything the
consoles write passes through ``mlharness.redact.scrub`` (an API key a server echoed, URL
credentials) on its way to the terminal."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from rich.console import Console
from rich.errors import MarkupError
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from mlharness.loadgen.mllog import LoadGenResult
from mlharness.names import FRACTION_METRICS, accuracy_text
from mlharness.record import RunRecord
from mlharness.redact import ScrubbedStream, scrub
from mlharness.tasks import AccuracyResult


class _Console(Console):
    """A console that never crashes on text it was not meant to parse: a string whose markup
    does not parse (a path or a message with ``[/]`` that a caller did not escape) is printed
    literally instead of raising MarkupError. Its text is scrubbed of secrets before rich lays
    it out (a long key is not split by wrapping) and again as it is written."""

    def print(self, *objects: Any, **kwargs: Any) -> None:  # noqa: A003 - rich's name
        objects = tuple(scrub(o) if isinstance(o, str) else o for o in objects)
        try:
            super().print(*objects, **kwargs)
        except MarkupError:
            super().print(*(escape(o) if isinstance(o, str) else o for o in objects), **kwargs)


def _unproxied(stream: TextIO) -> TextIO:
    """The stream behind a live display's redirection (as rich's own consoles write there)."""
    proxied: TextIO = getattr(stream, "rich_proxied_file", stream)
    return proxied


# Logs and pipes get a readable width instead of rich's 80-column fallback.
_out = ScrubbedStream(lambda: _unproxied(sys.stdout))
_err = ScrubbedStream(lambda: _unproxied(sys.stderr))
console = _Console(file=_out, width=None if sys.stdout.isatty() else 110)  # type: ignore[arg-type]
console_err = _Console(file=_err,  # type: ignore[arg-type]
                       width=None if sys.stderr.isatty() else 110)


#: seconds between progress lines when stderr is not a terminal (a log, CI, a pipe)
LINE_EVERY_S = 15.0


class LiveProgress:
    """A progress bar driven by RunProgress events (count-bound or time-bound); when stderr is
    not a terminal, a line every LINE_EVERY_S instead (a log shows a long probe is alive)."""

    def __init__(self, enabled: bool = True, lines: bool | None = None) -> None:
        self.lines = enabled and (not console_err.is_terminal if lines is None else lines)
        self.enabled = enabled and not self.lines
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(),
            TextColumn("{task.fields[detail]}"), TimeElapsedColumn(),
            console=console_err, transient=True, disable=not self.enabled,
        )
        self.tasks: dict[str, TaskID] = {}
        self.step = ""  # the label of the prepare step on show
        self._said = time.monotonic()  # when the last line was printed (or the start)

    def __enter__(self) -> LiveProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def __call__(self, event: Any) -> None:
        if self.lines:
            self._line(event)
            return
        key = "prepare" if event.phase == "prepare" else "run"
        if key == "prepare" and key in self.tasks and event.label != self.step:
            self.progress.remove_task(self.tasks.pop(key))  # the next step: a bar of its own
        if key == "prepare":
            self.step = event.label
        if key not in self.tasks:
            self.tasks[key] = self.progress.add_task(escape(event.label or event.phase),
                                                     total=None, detail="")
        tid = self.tasks[key]
        if event.phase == "prepare":  # a step without a count (total 0/None) shows its time
            self.progress.update(tid, description=escape(event.label or ""), completed=event.done,
                                 total=event.total or None,
                                 detail=f"{event.done}/{event.total}" if event.total else "")
            return
        detail = f"{event.done:,} samples"
        if event.phase == "load":
            detail = "loading samples"
        elif event.phase == "start":  # the worker's steps before LoadGen: no samples yet
            detail = ""
        if event.total:
            self.progress.update(tid, description=escape(event.label or ""), completed=event.done,
                                 total=event.total, detail=f"{event.done:,}/{event.total:,} samples")
        elif event.expected_s:
            left = max(event.expected_s - event.elapsed_s, 0.0)
            eta = f", ~{left:.0f}s left" if left > 0 else ", finishing"
            self.progress.update(tid, description=escape(event.label or ""),
                                 completed=min(event.elapsed_s, event.expected_s),
                                 total=event.expected_s, detail=detail + eta)
        else:
            self.progress.update(tid, description=escape(event.label or event.phase),
                                 detail=detail)


    def _line(self, event: Any) -> None:
        """A line of progress for a log, every LINE_EVERY_S (nothing for shorter steps)."""
        label = str(event.label or event.phase)
        now = time.monotonic()
        if now - self._said < LINE_EVERY_S:
            return
        self._said = now
        if event.phase in ("start", "prepare") and not event.total:
            detail = ""
        elif event.total:
            detail = f"{event.done:,}/{event.total:,}"
        else:
            detail = "loading samples" if event.phase == "load" else f"{event.done:,} done"
        when = f"{event.elapsed_s:.0f} s" if event.elapsed_s else ""
        if event.expected_s and event.elapsed_s:
            when += f" of ~{event.expected_s:.0f} s"
        parts = [p for p in (detail, when) if p]
        console_err.print(f"progress: {escape(label)}" + (f": {', '.join(parts)}" if parts
                                                          else ""), highlight=False,
                          soft_wrap=True)


def format_metric(result: LoadGenResult | None) -> str:
    if result is None or result.value is None:
        return "-"
    value, unit = result.value, result.unit or ""
    if "ms" in unit:
        return f"{value:,.3f} ms"
    if "tokens" in unit:
        rate = (f" ({result.samples_per_s:,.2f} samples/s)"
                if result.samples_per_s is not None else "")
        return f"{value:,.1f} tok/s" + (" done" if unit.startswith("completed") else "") + rate
    return f"{value:,.1f} " + ("QPS done" if unit.startswith("completed") else "samples/s")


def token_cell(result: LoadGenResult | None, name: str) -> str:
    """``50.5 / 2,000`` : a token latency's p99 against its limit (ms), or -."""
    t = result.tokens_ms if result is not None else {}
    p99, limit = t.get(f"{name}_p99_ms"), t.get(f"{name}_limit_ms")
    if p99 is None:
        return "-"
    return f"{p99:,.4g}" + (f"/{limit:,.0f}" if limit else "")


def accuracy_cell(acc: AccuracyResult | None) -> str:
    if acc is None:
        return "-"
    if acc.shown:
        return acc.shown
    digits = 4 if acc.metric in FRACTION_METRICS else 2
    target = f" (>= {acc.target:.{digits}f})" if acc.target is not None else ""
    return accuracy_text(acc.metric, acc.value) + target


def latency_cell(result: LoadGenResult | None, key: str) -> str:
    lat = result.latencies_ms if result is not None else {}
    return f"{lat[key]:.4g}" if key in lat else "-"


def results_table(records: Sequence[RunRecord], title: str = "Results") -> Table:
    """One row per run; reasons for INVALID/FAILED rows go in numbered notes below."""
    table = Table(title=escape(title), title_justify="left")
    tokens = any(r.result is not None and r.result.tokens_ms for r in records)
    columns = ["scenario", "mode", "result", "p90 ms", "p99 ms", "verdict", "accuracy"]
    if tokens:  # the LLM benchmarks: time to first token and per output token, p99 / limit
        columns[3:5] = ["TTFT ms p99/lim", "TPOT ms p99/lim"]
    for col in columns:
        table.add_column(col, no_wrap=True)
    notes = []
    for record in records:
        result = record.result
        verdict, why = record.verdict()
        style = {"VALID": "green", "PASS": "green", "DONE": "green"}.get(verdict, "red")
        if why:
            notes.append(why)
            verdict = f"{verdict} [{len(notes)}]"
        table.add_row(
            escape(str(record.spec.scenario)), escape(str(record.spec.mode)),
            format_metric(result) if record.spec.mode == "performance" else "-",
            *((token_cell(result, "ttft"), token_cell(result, "tpot")) if tokens else
              (latency_cell(result, "p90.00"), latency_cell(result, "p99.00"))),
            f"[{style}]{escape(verdict)}[/]", escape(accuracy_cell(record.accuracy)),
        )
    if notes:
        table.caption = "\n".join(escape(f"[{i}] {why}") for i, why in enumerate(notes, 1))
        table.caption_justify = "left"
    return table


def format_power(section: dict[str, Any] | None) -> str:
    """``120.3 W`` / ``35.10 mJ/query`` for run.json's ``power`` or ``energy`` section."""
    if not section or section.get("metric") is None:
        return "-"
    if section.get("unit") == "millijoules":
        return f"{section['metric']:,.2f} mJ/query"
    return f"{section['metric']:,.1f} W"


def power_lines(record: RunRecord) -> list[str]:
    """Lines under the verdict table for a run measured with --power or --energy."""
    lines = []
    power = record.power
    if power and power.get("error"):
        lines.append(f"[bold]power[/] (MLPerf): not computed — {escape(str(power['error']))}")
    if power and power.get("metric") is not None:
        ranging = power.get("ranging_avg_watts")
        extra = f", ranging run {ranging:,.1f} W" if ranging else ""
        lines.append(f"[bold]power[/] (MLPerf): "
                     f"{format_power(power)} — average {power['avg_watts']:,.1f} W over "
                     f"{power['window_s']:.1f} s, {power['samples']} samples{extra}; analyzer "
                     + escape(f"{power.get('analyzer') or '?'} via {power.get('server')}"))
        if power.get("warning"):
            lines.append(f"  [yellow]warning:[/] {escape(str(power['warning']))}")
        if power.get("simulated"):
            lines.append("  [yellow]simulated analyzer (PTDaemon simulator): not an MLPerf "
                         "power result[/]")
    energy = record.energy
    if energy:
        if energy.get("error"):
            lines.append(f"[bold]energy[/] (RAPL estimate): not computed — "
                         f"{escape(str(energy['error']))}")
        else:
            lines.append(f"[bold]energy[/] (RAPL estimate, not an MLPerf power result): "
                         f"{format_power(energy)} — {energy['joules']:,.1f} J, average "
                         f"{energy['avg_watts']:,.1f} W over {energy['window_s']:.1f} s "
                         + escape(f"({', '.join(energy.get('counted') or [])})"))
    return lines


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))
