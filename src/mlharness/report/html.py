"""``mlharness report``: one self-contained HTML page (inline CSS and SVG, no script, nothing
fetched) with the comparison table, per-run latency figures and plots, the Server tune search,
accuracy against target, the system description and the command that repeats each run."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import Any

from mlharness import __version__
from mlharness.rules import endpoints
from mlharness.loadgen.mllog import parse_run_logs
from mlharness.report import plots
from mlharness.report.build import build_comparison
from mlharness.report.output import MARKER
from mlharness.report.latency import percentile_rows, trace_latencies
from mlharness.report.sessions import tune_sessions
from mlharness.report.sources import Source
from mlharness.report.table import SAME_SETTINGS, Comparison, cell_text, delta_text, format_value
from mlharness.store import IndexedRun, load_run_json, open_store

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d232a;background:#f6f7f9}
main{max-width:1180px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d5d9de;padding-bottom:4px}
h3{font-size:15px;margin:0 0 6px}.sub{color:#5b6570;margin:0 0 16px}
table{border-collapse:collapse;background:#fff;margin:6px 0 10px}
th,td{border:1px solid #d5d9de;padding:4px 8px;text-align:right;white-space:nowrap}
th{background:#eef1f4}td:first-child,th:first-child{text-align:left}
tr.delta td{background:#fafbfc;font-style:italic}
.better{color:#1e7b34}.worse{color:#b3261e}.mark{color:#b3261e;font-weight:600}
.card{background:#fff;border:1px solid #d5d9de;border-radius:6px;padding:12px 14px;margin:12px 0}
.grid{display:flex;flex-wrap:wrap;gap:14px;align-items:flex-start}
figure{margin:0}figure svg{width:520px;max-width:100%;height:auto;display:block}
figcaption{font-size:12px;color:#5b6570}
code,pre{font:12px/1.4 ui-monospace,Menlo,Consolas,monospace}
pre{background:#f0f2f4;padding:6px 8px;border-radius:4px;white-space:pre-wrap;word-break:break-all;margin:4px 0}
.ok{color:#1e7b34;font-weight:600}.bad{color:#b3261e;font-weight:600}
.notes{font-size:12px;color:#5b6570}.kv td{text-align:left}
.table-scroll{max-width:100%;overflow-x:auto;margin:6px 0 10px}.table-scroll table{margin:0}
#comparison{border-collapse:separate;border-spacing:0}
#comparison th,#comparison td{border-width:0 1px 1px 0}#comparison thead th{border-top-width:1px}
#comparison th{white-space:normal;min-width:7em;max-width:11em;vertical-align:bottom}
#comparison td:first-child,#comparison th:first-child{position:sticky;left:0;z-index:1;
background:#fff;max-width:none;border-left-width:1px}
#comparison th:first-child{background:#eef1f4}#comparison tr.delta td:first-child{background:#fafbfc}
"""


def render(sources: list[Source], by: str | None = None, title: str = "mlharness report") -> str:
    """The whole page as one string."""
    table, notes = build_comparison([], by=by, sources=sources)
    runs = [(src, r) for src in sources for r in src.runs]
    perf = [(s, r) for s, r in runs if r.mode == "performance" and r.state == "ok"]
    acc = [(s, r) for s, r in runs if r.mode == "accuracy" and r.state == "ok"]
    body = [
        f"<h1>{escape(title)}</h1>",
        f"<p class='sub'>generated {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC by mlharness "
        f"{escape(__version__)} from {escape(', '.join(str(s.path) for s in sources))}</p>",
        "<h2>Comparison</h2>", comparison_html(table, notes),
    ]
    if acc:
        body += ["<h2>Accuracy against target</h2>", accuracy_html(acc)]
    searches = tune_searches(sources)
    if searches:
        body += ["<h2>Server tune search</h2>", *searches]  # LLMs: Interactive too
    if perf:
        body.append("<h2>Performance runs</h2>")
        body += [run_card(src, row) for src, row in perf]
    body += [submission_card(src) for src in sources if src.kind == "submission"]
    unfinished = [r for _, r in runs if r.state != "ok"]
    if unfinished:
        body += ["<h2>Runs not used</h2>", "<ul class='notes'>"] + [
            f"<li>{escape(r.path)}: {escape(r.state.upper())}"
            f"{' — ' + escape('; '.join(r.reasons)) if r.reasons else ''}"
            "</li>" for r in unfinished] + ["</ul>"]
    return (f"<!DOCTYPE html>\n{MARKER}\n<html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{escape(title)}</title><style>{CSS}</style></head>"
            f"<body><main>{''.join(body)}</main></body></html>\n")


def comparison_html(table: Comparison, notes: list[str]) -> str:
    if not table.columns:
        return "<p class='notes'>no finished performance results to compare</p>"
    titles = [table.by, *(c.title for c in table.columns)]
    head = "".join(f"<th>{escape(t)}</th>" for t in titles)
    rows = []
    for group in table.groups:
        cells = []
        for c in table.columns:
            cell = table.cells[group].get(c.key)
            text = escape(cell_text(cell))
            if cell is not None and cell.marks:
                text = text.replace(escape(" ".join(cell.marks)),
                                    f"<span class='mark'>{escape(' '.join(cell.marks))}</span>")
            cells.append(f"<td>{text}</td>")
        rows.append(f"<tr><td>{escape(group)}</td>{''.join(cells)}</tr>")
    for group, _base, deltas in table.deltas:
        label = "Delta" if len(table.groups) == 2 else f"Delta {group}"
        cells = []
        for c in table.columns:
            d = deltas[c.key]
            cls = "" if d.better is None else (" class='better'" if d.better else " class='worse'")
            cells.append(f"<td{cls}>{escape(delta_text(d))}</td>")
        rows.append(f"<tr class='delta'><td>{escape(label)}</td>{''.join(cells)}</tr>")
    legend = ("<p class='notes'>Delta: change against the first row with a result in the "
              "column; latency: lower is better, throughput: higher is better; n/c = not "
              "compared." + (f" {escape(SAME_SETTINGS)}" if table.same_settings_only else "")
              + "</p>")
    foot = "".join(f"<p class='notes'>[{i}] {escape(n)}</p>" for i, n in enumerate(notes, 1))
    # wide tables scroll inside their box (first column kept in view), never past the page
    return (f"<div class='table-scroll'><table id='comparison'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>{legend}{foot}")


def _figure(kind: str, svg: str, caption: str) -> str:
    return (f"<figure class='plot' data-plot='{kind}'>{svg}"
            f"<figcaption>{escape(caption)}</figcaption></figure>")


def _run_json(src: Source, row: IndexedRun) -> dict[str, Any]:
    try:
        return load_run_json((src.run_root or src.path) / row.path)
    except ValueError:
        return {}


def run_card(src: Source, row: IndexedRun) -> str:
    data = _run_json(src, row)
    result = data.get("result") or {}
    verdict = "VALID" if row.valid else "INVALID"
    cls = "ok" if row.valid else "bad"
    lat = result.get("latencies_ms") or {}
    pct = "".join(f"<tr><td>{escape(k)}</td><td>{v:,.4g}</td></tr>" for k, v in percentile_rows(lat))
    parts = [f"<div class='card run' id='{escape(row.path)}'>",
             f"<h3>{escape(row.benchmark)} {escape(row.scenario)} — "
             f"<span class='{cls}'>{verdict}</span> — {escape(_value(row))}</h3>",
             f"<p class='notes'>{escape(row.path)} · started {escape(row.started or '')} · "
             f"batch {escape(str(row.batch_size or '-'))} · {escape(row.backend or '')} "
             f"{escape(row.precision or '')} · settings {escape(row.settings_hash)}</p>"]
    if row.reasons:
        parts.append(f"<p class='bad'>{escape('; '.join(row.reasons))}</p>")
    parts.append("<div class='grid'>")
    if pct:
        parts.append(f"<table class='percentiles'><thead><tr><th>latency</th><th>ms</th></tr>"
                     f"</thead><tbody>{pct}</tbody></table>")
    tokens = token_table(result.get("tokens_ms") or {}, row.scenario)
    if tokens:
        parts.append(tokens)
    trace = trace_latencies((src.run_root or src.path) / row.path)
    if trace:
        marks = {k: v for k, v in lat.items() if k in ("p50.00", "p90.00", "p99.00")}
        parts.append(_figure("histogram", plots.latency_histogram(trace.latency_ms, marks),
                             "per-query latencies from mlperf_log_trace.json"))
        parts.append(_figure("timeline", plots.latency_over_time(trace.issued_s, trace.latency_ms),
                             "latency of each query against its issue time"))
    else:
        parts.append("<p class='notes'>no per-query latencies kept (run with --trace for a "
                     "histogram and latency over time)</p>")
    parts.append("</div>")
    parts.append(system_html(data))
    parts.append(f"<p class='notes'>reproduce:</p><pre class='command'>{escape(row.command)}</pre>")
    parts.append("</div>")
    return "".join(parts)


def token_table(tokens: dict[str, Any], scenario: str) -> str:
    """An LLM run's time to first token and per output token (p99, mean) against their limits
    (Server, Interactive), each p99 marked within or over; "" without token latencies."""
    limited = scenario in ("Server", "Interactive")

    def ms(value: Any) -> str:
        return f"{value:,.4g}" if isinstance(value, (int, float)) else "-"

    rows = []
    for name, key in (("TTFT", "ttft"), ("TPOT", "tpot")):
        p99 = tokens.get(f"{key}_p99_ms")
        limit = tokens.get(f"{key}_limit_ms") if limited else None
        if not isinstance(p99, (int, float)):
            continue
        verdict = ""
        if isinstance(limit, (int, float)):
            verdict = ("<span class='ok'>within</span>" if p99 <= limit
                       else "<span class='bad'>over</span>")
        rows.append(f"<tr><td>{name}</td><td>{ms(p99)}</td>"
                    f"<td>{ms(tokens.get(f'{key}_mean_ms'))}</td><td>{ms(limit)}</td>"
                    f"<td>{verdict}</td></tr>")
    if not rows:
        return ""
    return ("<table class='tokens'><thead><tr><th>token latency</th><th>p99 ms</th>"
            "<th>mean ms</th><th>limit ms</th><th>p99</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def _value(row: IndexedRun) -> str:
    if row.value is None:
        return "no result"
    unit = row.unit or ""
    return f"{row.value:,.4g} ms ({unit})" if "ms" in unit else f"{row.value:,.1f} {unit}"


def system_html(data: dict[str, Any]) -> str:
    system = dict(data.get("system") or {})
    backend = data.get("backend") or {}
    if isinstance(backend, dict):
        system.update({f"backend {k}": v for k, v in backend.items()
                       if k in ("name", "providers", "threads", "precision", "model")})
    versions = data.get("versions") or {}
    if data.get("model_git_commit"):
        system["model code commit"] = data["model_git_commit"]
    rows = "".join(f"<tr><td>{escape(str(k))}</td><td>{escape(_short(v))}</td></tr>"
                   for k, v in {**system, **{f"{k} version": v for k, v in versions.items()}}.items())
    return (f"<details><summary>system description</summary><table class='kv system'>"
            f"<tbody>{rows}</tbody></table></details>") if rows else ""


def _short(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def accuracy_html(acc: list[tuple[Source, IndexedRun]]) -> str:
    rows, items = [], []
    for _src, r in acc:
        passed = r.accuracy_passed
        verdict = {True: "<span class='ok'>PASS</span>", False: "<span class='bad'>FAIL</span>",
                   None: "no target"}[passed]
        target = f"{r.accuracy_target:.3f}" if r.accuracy_target is not None else "-"
        value = r.accuracy if r.accuracy is not None else 0.0
        rows.append(f"<tr><td>{escape(r.path)}</td><td>{escape(r.benchmark)}</td>"
                    f"<td>{escape(str(r.accuracy_metric))}</td><td>{value:.3f}</td>"
                    f"<td>{target}</td><td>{verdict}</td></tr>")
        items.append((r.path.split("/")[-1], value, r.accuracy_target))
    table = ("<div class='table-scroll'><table id='accuracy'><thead><tr><th>run</th>"
             "<th>benchmark</th><th>metric</th><th>value %</th><th>target %</th><th>verdict</th>"
             "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")
    return table + _figure("accuracy", plots.accuracy_bars(items), "accuracy against target")


def tune_searches(sources: list[Source]) -> list[str]:
    """Server (and the LLMs' Interactive) probe runs under ``_tune/``, one plot per benchmark x
    scenario: (target QPS, p99, valid) against the latency bound; an LLM's probes as the p99 of
    TTFT or TPOT, whichever is nearer its limit, in % of that limit."""
    out = []
    roots = {s.run_root for s in sources if s.run_root is not None}
    for root in sorted(roots):
        with open_store(root) as store:  # one sync of the index per runs folder
            probed = {scenario: store.query(kinds=("probe",), scenario=scenario)
                      for scenario in ("Server", "Interactive")}
        for scenario, probes in probed.items():
            by_bench: dict[str, list[IndexedRun]] = {}
            for p in probes:
                if p.state == "ok":
                    by_bench.setdefault(p.benchmark, []).append(p)
            for bench, rows in sorted(by_bench.items()):
                figure = _tune_figure(root, bench, scenario, rows)
                if figure:
                    out.append(figure)
    return out


def _tune_figure(root: Path, bench: str, scenario: str, rows: list[IndexedRun]) -> str:
    series: list[tuple[str, list[tuple[float, float, bool]]]] = []
    bound = None
    tokens = False
    for session in tune_sessions(rows):
        points = []
        for r in session.probes:
            data = _run_json(Source(root, "runs", "", run_root=root), r)
            result = data.get("result") or {}
            eff = result.get("effective") or {}
            share = _limit_share(result.get("tokens_ms") or {})
            p99 = share if share is not None else (result.get("latencies_ms") or {}).get("p99.00")
            qps = (eff.get("effective_target_qps")
                   or (data.get("spec") or {}).get("target_qps"))
            try:  # a probe whose record holds no numbers here is left out of the plot
                point = (float(qps), float(p99),  # type: ignore[arg-type]
                         bool(r.valid))
                if share is not None:
                    tokens = True
                elif eff.get("effective_target_latency_ns"):
                    bound = float(eff["effective_target_latency_ns"]) / 1e6
            except (TypeError, ValueError):
                continue
            points.append(point)
        if points:
            series.append((f"{session.label} ({len(points)} probes)", points))
    if not series:
        return ""
    every = [p for _, pts in series for p in pts]
    best = max((p for p in every if p[2]), default=None)
    caption = (f"{len(every)} probes in {len(series)} tune "
               f"session{'s' if len(series) > 1 else ''}; " +
               (f"best VALID target {best[0]:,.0f} QPS" if best else "none VALID"))
    title = f"{bench} {scenario} search"
    if tokens:
        caption += "; y: TTFT or TPOT p99, whichever is nearer its limit, in % of that limit"
        svg = plots.tune_points(series, 100.0, title, ylabel="token p99 (% of its limit)",
                                bound_label="limit (TTFT, TPOT)")
    else:
        svg = plots.tune_points(series, bound, title)
    return _figure("tune", svg, caption)


def _limit_share(tokens: dict[str, Any]) -> float | None:
    """The larger of TTFT p99 / limit and TPOT p99 / limit, in %; None without both."""
    shares = [100.0 * tokens[f"{k}_p99_ms"] / tokens[f"{k}_limit_ms"] for k in ("ttft", "tpot")
              if isinstance(tokens.get(f"{k}_p99_ms"), (int, float))
              and isinstance(tokens.get(f"{k}_limit_ms"), (int, float))
              and tokens[f"{k}_limit_ms"] > 0]
    return max(shares) if shares else None


def submission_card(src: Source) -> str:
    """A submission tree: per performance/run_1 its verdict and LoadGen percentiles (per
    endpoints-format result those its summary holds), and the system description from
    ``systems/<system>.json``."""
    parts = [f"<h2>Submission {escape(str(src.path))}</h2>"]
    systems_seen: set[Path] = set()
    for e in src.entries:
        run_1 = Path(e.source)
        if endpoints.is_endpoints_dir(run_1):  # a result in the endpoints format
            run_1 = run_1 / "performance" / "run_1"  # where the layout below is reckoned from
            values = endpoints.read(run_1.parents[1], "performance").values
            latencies = {f"p{m.group(1)}": float(v) / 1e6 for k, v in values.items()
                         if (m := re.fullmatch(r"result_(\d+\.\d+)_percentile_latency_ns", k))
                         and isinstance(v, (int, float))}
            if isinstance(values.get("result_mean_latency_ns"), (int, float)):
                latencies["mean"] = float(values["result_mean_latency_ns"]) / 1e6
            valid, unit, reasons = e.valid, "(endpoints format)", e.why
        else:
            result = parse_run_logs(run_1)
            latencies, valid = result.latencies_ms, result.valid
            unit, reasons = result.unit or "", "; ".join(result.reasons)
        cls, verdict = {True: ("ok", "VALID"), False: ("bad", "INVALID"),
                        None: ("notes", "not judged")}[valid]
        pct = "".join(f"<tr><td>{escape(k)}</td><td>{v:,.4g}</td></tr>"
                      for k, v in percentile_rows(latencies))
        parts += [f"<div class='card run'><h3>{escape(e.group)} {escape(e.benchmark)} "
                  f"{escape(e.scenario)} — <span class='{cls}'>{verdict}</span> — "
                  f"{escape(cell_text_value(e.value))} {escape(unit)}</h3>",
                  f"<p class='notes'>{escape(str(e.source))}</p>"]
        if reasons:
            parts.append(f"<p class='bad'>{escape(reasons)}</p>")
        if pct:
            parts.append("<table class='percentiles'><thead><tr><th>latency</th><th>ms</th>"
                         f"</tr></thead><tbody>{pct}</tbody></table>")
        # <base>/results/<system>/<benchmark>/<scenario>/performance/run_1
        system_dir = run_1.parents[3]
        desc = system_dir.parent.parent / "systems" / f"{system_dir.name}.json"
        if desc.is_file() and desc not in systems_seen:
            systems_seen.add(desc)
            try:
                parts.append(system_html({"system": json.loads(desc.read_text())}))
            except (UnicodeDecodeError, json.JSONDecodeError):
                parts.append(f"<p class='bad'>{escape(str(desc))} is not valid UTF-8 JSON</p>")
        parts.append("<p class='notes'>reproduce: see the submission's "
                     "measurements/&lt;system&gt;/&lt;benchmark&gt;/&lt;scenario&gt;/README.md</p>"
                     "</div>")
    return "".join(parts)


def cell_text_value(value: float | None) -> str:
    return format_value(value) or "-"


__all__ = ["render", "delta_text"]
