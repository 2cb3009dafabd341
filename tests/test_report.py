"""`mlharness report`: one self-contained HTML page, opened in real headless Chromium."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chromium_support import ensure_chromium, open_page
from store_support import demo_runs, mlharness

#: what the page must show: the table, and every plot the runs allow
DOM_QUERY = """JSON.stringify({
  title: document.title,
  tableRows: document.querySelectorAll('#comparison tbody tr').length,
  deltaRows: document.querySelectorAll('#comparison tr.delta').length,
  plots: Array.from(document.querySelectorAll('figure.plot')).map(f => ({
      kind: f.dataset.plot, svg: !!f.querySelector('svg'),
      w: f.getBoundingClientRect().width, h: f.getBoundingClientRect().height,
      marks: f.querySelectorAll('svg path, svg use, svg rect').length})),
  runCards: document.querySelectorAll('.card.run').length,
  percentileTables: document.querySelectorAll('table.percentiles').length,
  commands: Array.from(document.querySelectorAll('pre.command')).map(p => p.textContent),
  accuracyRows: document.querySelectorAll('#accuracy tbody tr').length,
  systems: document.querySelectorAll('table.system').length,
  scripts: document.scripts.length,
})"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_runs(tmp_path_factory)


@pytest.fixture(scope="module")
def report(runs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "report.html"
    proc = mlharness("report", str(runs), "--by", "batch_size", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def test_report_is_self_contained(report: Path) -> None:
    html = report.read_text()
    # nothing to fetch: no external URL in src/href, no script, no stylesheet link
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html)
    assert "<script" not in html and "<link" not in html
    assert html.count("<figure class='plot'") == 4  # histogram, timeline, tune, accuracy
    assert "bound 10 ms" in html  # the Server latency bound drawn in the tune plot


@pytest.mark.slow
def test_report_renders_in_chromium(report: Path, runs: Path) -> None:
    binary, why = ensure_chromium()
    if binary is None:
        pytest.fail(f"cannot run the browser test: {why}")
    page = open_page(binary, report.as_uri(), DOM_QUERY)
    assert page.errors == [], page.errors
    assert all(u.startswith(("file:", "data:", "about:")) for u in page.requests), page.requests
    dom = page.dom
    assert dom["title"] == "mlharness report" and dom["scripts"] == 0
    # 3 batch sizes + 1 Delta row (batch 32 against batch 8, the first with an Offline result)
    assert dom["tableRows"] == 4 and dom["deltaRows"] == 1
    kinds = sorted(p["kind"] for p in dom["plots"])
    # the traced SingleStream run: histogram + timeline; the Server search; one accuracy chart
    assert kinds == ["accuracy", "histogram", "timeline", "tune"], kinds
    for plot in dom["plots"]:  # drawn, visible, with marks in it
        assert plot["svg"] and plot["w"] > 200 and plot["h"] > 80 and plot["marks"] > 10, plot
    assert dom["runCards"] == dom["percentileTables"] == 3 == dom["systems"]
    assert all(c.startswith("mlharness run --benchmark demo") for c in dom["commands"])
    assert dom["accuracyRows"] == 2
    assert page.screenshot.startswith(b"\x89PNG") and len(page.screenshot) > 50_000
    report.with_suffix(".png").write_bytes(page.screenshot)  # kept beside the report


def test_console_errors_are_caught(tmp_path: Path) -> None:
    """The check above would see a broken page: an exception, console.error, a missing file."""
    binary, why = ensure_chromium()
    if binary is None:
        pytest.fail(f"cannot run the browser test: {why}")
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><img src='missing.png'><script>console.error('boom');"
                   "undefinedFunction();</script></body></html>")
    page = open_page(binary, bad.as_uri(), "JSON.stringify(1)")
    text = "\n".join(page.errors)
    assert "boom" in text and "undefinedFunction" in text and "ERR_FILE_NOT_FOUND" in text


def test_report_of_a_submission_tree(runs: Path, tmp_path: Path) -> None:
    """A tree laid out as `mlharness submit` does (real LoadGen logs, a system description)."""
    import json
    import shutil

    base = tmp_path / "submission" / "open" / "Mine"
    perf = next(p for p in (runs / "demo").iterdir() if p.name.startswith("SingleStream"))
    run_1 = base / "results" / "my_box" / "resnet50" / "SingleStream" / "performance" / "run_1"
    run_1.mkdir(parents=True)
    for name in ("mlperf_log_detail.txt", "mlperf_log_summary.txt"):
        shutil.copy(perf / name, run_1 / name)
    (base / "systems").mkdir()
    (base / "systems" / "my_box.json").write_text(json.dumps({"system_name": "My Box",
                                                              "host_processor_core_count": "8"}))
    out = tmp_path / "sub.html"
    proc = mlharness("report", str(tmp_path / "submission"), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    html = out.read_text()
    assert "Mine/my_box" in html and "table class='percentiles'" in html and "My Box" in html
    assert "id='comparison'" in html and "<script" not in html


#: at the window's width: does the page overflow, does the table scroll in its box, and can every
#: header be brought into view there (not under the sticky first column, not off the page)?
WIDE_QUERY = """(() => {
  const wrap = document.querySelector('.table-scroll');
  const table = wrap.querySelector('#comparison');
  const ths = Array.from(table.querySelectorAll('thead th'));
  const firstW = ths[0].getBoundingClientRect().width;
  const reach = ths.map((th, i) => {
    wrap.scrollLeft = Math.max(0, th.offsetLeft - firstW);
    const r = th.getBoundingClientRect(), w = wrap.getBoundingClientRect();
    const hit = document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2);
    return {text: th.textContent, inside: r.left >= w.left - 1 && r.right <= w.right + 1,
            onTop: hit === th || th.contains(hit), w: r.width, h: r.height};
  });
  wrap.scrollLeft = wrap.scrollWidth;
  const w = wrap.getBoundingClientRect();
  const stuck = ths[0].getBoundingClientRect().left - w.left;
  // at the box's left edge of every row: its first cell, opaque over the scrolled columns
  const edge = Array.from(table.rows).map(tr => {
    const c = tr.cells[0], r = c.getBoundingClientRect();
    const hit = document.elementFromPoint(w.left + 1, (r.top + r.bottom) / 2);
    return hit === c || c.contains(hit);
  });
  return JSON.stringify({
    pageWidth: document.documentElement.scrollWidth, window: window.innerWidth,
    wrapWidth: wrap.clientWidth, tableWidth: wrap.scrollWidth,
    overflowX: getComputedStyle(wrap).overflowX, headers: reach, firstColumnOffset: stuck,
    edge: edge, background: getComputedStyle(table.rows[1].cells[0]).backgroundColor});
})()"""


@pytest.mark.slow
def test_a_wide_comparison_scrolls_in_its_box_at_1400px(tmp_path: Path) -> None:
    """Every benchmark x scenario of a published-results CSV: far wider than the window."""
    from mlharness.report.table import BENCHMARK_TITLE
    from test_compare import PUBLISHED_HEADER

    binary, why = ensure_chromium()
    if binary is None:
        pytest.fail(f"cannot run the browser test: {why}")
    lines = [PUBLISHED_HEADER]
    for org, factor in (("Acme", 1.0), ("Initech Corporation", 1.2), ("Globex", 0.9)):
        for bench in BENCHMARK_TITLE:
            for scenario, value in (("SingleStream", 2.5), ("MultiStream", 9.0),
                                    ("Server", 900.0), ("Offline", 1000.0)):
                lines.append(f'{org},available,closed,"edge","{org} Box",box,{bench},{bench},'
                             f'{scenario},{value * factor},76.1,1,"CPU",1,8,"",0,x,"ORT",'
                             '"Linux","",1,0,v6.0,0,False,')
    published = tmp_path / "published.csv"
    published.write_text("\n".join(lines) + "\n")
    out = tmp_path / "wide.html"
    proc = mlharness("report", str(published), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    page = open_page(binary, out.as_uri(), WIDE_QUERY, width=1400)
    assert page.errors == [], page.errors
    dom = page.dom
    assert len(dom["headers"]) == 1 + 4 * len(BENCHMARK_TITLE)
    # the page itself is not wider than the window: nothing is cut off at its edge
    assert dom["pageWidth"] <= dom["window"] == 1400, dom["pageWidth"]
    # the table is wider than its box and scrolls inside it
    assert dom["overflowX"] == "auto" and dom["tableWidth"] > dom["wrapWidth"] + 500
    for h in dom["headers"]:  # each header can be scrolled into the box, in full, on top
        assert h["inside"] and h["onTop"], h
    assert all(h["w"] < 200 for h in dom["headers"][1:])  # long titles wrap onto lines
    assert dom["firstColumnOffset"] == pytest.approx(0, abs=1)  # the row names stay in view
    assert all(dom["edge"]) and dom["background"] == "rgb(255, 255, 255)"  # and hide the rest
    (tmp_path / "wide.png").write_bytes(page.screenshot)


def test_two_tune_sessions_are_two_series(runs: Path, tmp_path: Path) -> None:
    """The fixture's Server search, and the same two probes made again two hours later."""
    import json
    import shutil
    from datetime import datetime, timedelta

    copy = tmp_path / "runs"
    shutil.copytree(runs, copy, ignore=shutil.ignore_patterns("mlharness.sqlite*",
                                                              "mlperf_log_trace.json"))
    probes = sorted((copy / "_tune" / "demo").glob("Server-*"))
    assert len(probes) == 2
    later = []
    for p in probes:
        again = p.with_name(p.name + "-again")
        shutil.copytree(p, again)
        data = json.loads((again / "run.json").read_text())
        for key in ("started", "finished"):
            t = datetime.fromisoformat(data[key]) + timedelta(hours=2)
            data[key] = t.isoformat()
        (again / "run.json").write_text(json.dumps(data))
        later.append(data["started"])
    out = tmp_path / "tune.html"
    proc = mlharness("report", str(copy), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    html = out.read_text()
    assert "4 probes in 2 tune sessions" in html
    series = re.findall(r'<g id="tune-series-(\d+)">\s*<path d="([^"]+)"', html)
    assert [s[0] for s in series] == ["0", "1"]  # one line each, no line across sessions
    for _, d in series:  # each joins its own 2 probes, in QPS order (left to right)
        xs = [float(x) for x in re.findall(r"[ML] ?(-?[\d.]+) ", d)]
        assert len(xs) == 2 and xs == sorted(xs), d
    # each its legend entry, named after when the session started
    assert f"session {min(later)[:16].replace('T', ' ')} (2 probes)" in html


def test_one_tune_session_is_one_series(report: Path) -> None:
    html = report.read_text()
    assert "2 probes in 1 tune session;" in html
    assert re.findall(r'id="tune-series-\d+"', html) == ['id="tune-series-0"']
