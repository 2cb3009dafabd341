"""LLM results wherever results appear: `runs` (the index), `compare` and `report` show tokens/s
(completed tokens/s in Server and Interactive) with their units, TTFT and TPOT p99 against their
limits, and Interactive as a scenario of its own; published results in Tokens/s are read.

The run directories are real: `mlharness run` of llama3.1-8b (and the edge variant) with the
TimedStream test backend and a tests/llm_fixtures.py dataset.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from llm_fixtures import articles, write_cnn_dataset

from store_support import mlharness

TESTS = Path(__file__).resolve().parent
FAST = ["--backend-option", "ttft_s=0.005", "--backend-option", "gap_s=0.002",
        "--backend-option", "n_tokens=4"]
#: (benchmark, flags): each VALID on any machine but the TPOT one (40 ms a token, limit 30)
LLM_RUNS: list[tuple[str, list[str]]] = [
    # 4 streams at once, 11 ms each: ~360 samples/s, so 880 samples last >= 2 s (VALID)
    ("llama3.1-8b", ["-s", "Offline", "--target-qps", "400", *FAST,
                     "--backend-option", "max_streams=4"]),
    ("llama3.1-8b", ["-s", "Server", "--target-qps", "300", "--min-duration", "500", *FAST]),
    ("llama3.1-8b", ["-s", "Interactive", "--target-qps", "300", "--min-duration", "500",
                     *FAST]),
    ("llama3.1-8b", ["-s", "Interactive", "--target-qps", "300", "--min-duration", "500",
                     "--backend-option", "ttft_s=0.005", "--backend-option", "gap_s=0.04",
                     "--backend-option", "n_tokens=4"]),
    ("llama3.1-8b-edge", ["-s", "SingleStream", "--target-latency", "5", "--min-duration",
                          "500", *FAST]),
    # an Interactive probe as `mlharness tune` keeps it (<runs>/_tune): the report's search plot
    ("_tune/llama3.1-8b", ["-s", "Interactive", "--target-qps", "300", "--min-duration", "500",
                           *FAST]),
]


def _run(root: Path, dataset: Path, bench: str, flags: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(TESTS.parent / "src"), str(TESTS), os.environ.get("PYTHONPATH", "")])}
    if bench.startswith("_tune/"):
        root, bench = root / "_tune", bench.removeprefix("_tune/")
    return subprocess.Popen([sys.executable, "-m", "mlharness.cli.main", "run", "-b", bench,
                             "--dataset", str(dataset), "--backend",
                             "stream_backends:TimedStream", *flags, "--output-dir", str(root),
                             "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("llm-results")
    dataset = write_cnn_dataset(base / "cnn_eval.json", articles(20),
                                lambda text: [len(w) for w in text.split()])
    root = base / "runs"
    # all at once: they mostly wait on the backend's timers (limits far above its latencies)
    procs = [_run(root, dataset, bench, flags) for bench, flags in LLM_RUNS]
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode in (0, 1), out  # 1 = INVALID (the TPOT run)
    return root


def _rows(runs: Path, *flags: str) -> list[dict]:
    proc = mlharness("runs", "--runs-dir", str(runs), "--json", *flags)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _key(r: dict) -> tuple[str, str, str]:
    """benchmark, scenario, and for Interactive which run: "slow" (40 ms a token) or "fast"
    (validity is LoadGen's: a stall of the loaded machine may fail the fast one's early
    stopping, so it is not what tells them apart)."""
    speed = "slow" if (r["tpot_p99_ms"] or 0) > 30 else "fast"
    return r["benchmark"], r["scenario"], speed if r["scenario"] == "Interactive" else ""


def test_runs_lists_tokens_per_second_and_token_latencies(runs: Path) -> None:
    rows = {_key(r): r for r in _rows(runs)}
    assert len(rows) == len(LLM_RUNS) - 1  # not the probe
    offline = rows["llama3.1-8b", "Offline", ""]
    assert offline["unit"] == "tokens/s" and offline["value"] > 0
    assert offline["ttft_limit_ms"] is None and offline["tpot_limit_ms"] is None
    server = rows["llama3.1-8b", "Server", ""]
    assert server["unit"] == "completed tokens/s"
    assert (server["ttft_limit_ms"], server["tpot_limit_ms"]) == (2000, 100)
    good = rows["llama3.1-8b", "Interactive", "fast"]
    assert (good["ttft_limit_ms"], good["tpot_limit_ms"]) == (500, 30)
    assert good["ttft_p99_ms"] < 500
    bad = rows["llama3.1-8b", "Interactive", "slow"]
    assert bad["valid"] is False and any("TPOT p99" in r for r in bad["reasons"])
    edge = rows["llama3.1-8b-edge", "SingleStream", ""]
    assert edge["unit"] == "latency p90 ms" and edge["value"] > 0  # the checker's result field
    assert edge["ttft_p99_ms"] is not None and edge["ttft_limit_ms"] is None
    # Interactive is a scenario of its own for the filters
    assert {r["scenario"] for r in _rows(runs, "-s", "interactive")} == {"Interactive"}
    table = mlharness("runs", "--runs-dir", str(runs), "-b", "llama3.1-8b")
    text = " ".join(table.stdout.split())
    assert table.returncode == 0, table.stderr
    assert "tok/s done" in text and "tok/s " in text and "Interactive" in text
    assert "TTFT, TPOT p99/lim ms" in text and "5" in text and "/30" in text and "/2,000" in text


def test_an_index_without_token_columns_is_rebuilt(runs: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "runs"
    shutil.copytree(runs, copy)
    assert mlharness("runs", "--runs-dir", str(copy)).returncode == 0
    with sqlite3.connect(copy / "mlharness.sqlite") as conn:  # as schema 4 left it
        conn.execute("UPDATE runs SET ttft_p99_ms = NULL, tpot_p99_ms = NULL")
        conn.execute("PRAGMA user_version = 4")
    conn.close()
    rows = _rows(copy, "-s", "Interactive")
    assert rows and all(r["tpot_p99_ms"] is not None for r in rows)
    with sqlite3.connect(copy / "mlharness.sqlite") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
    conn.close()


def test_compare_has_token_columns_and_an_interactive_column(runs: Path) -> None:
    proc = mlharness("compare", "--runs-dir", str(runs), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    cols = {c["key"]: c for c in data["columns"]}
    assert cols["llama3.1-8b/Offline"]["unit"] == "Tokens/s"
    assert cols["llama3.1-8b/Server"]["title"] == "Llama3.1-8B Server (Tokens/s)"
    assert cols["llama3.1-8b/Interactive"]["title"] == "Llama3.1-8B Interactive (Tokens/s)"
    assert cols["llama3.1-8b-edge/SingleStream"]["unit"] == "Latency (ms)"
    assert list(cols).index("llama3.1-8b/Interactive") > list(cols).index("llama3.1-8b/Offline")
    cells = [row["llama3.1-8b/Interactive"] for row in data["cells"].values()
             if "llama3.1-8b/Interactive" in row]
    assert len(cells) == 2 and False in {c["valid"] for c in cells}
    for c in cells:
        assert c["unit"] == "Tokens/s" and c["tokens"]["tpot_limit_ms"] == 30
    md = mlharness("compare", "--runs-dir", str(runs), "-s", "Interactive")
    assert md.returncode == 0, md.stderr
    assert "Llama3.1-8B Interactive (Tokens/s)" in md.stdout
    assert "TPOT p99" in md.stdout and "/30 ms" in md.stdout and "/500 ms" in md.stdout
    assert "INVALID" in md.stdout and "over the 30 ms limit" in md.stdout  # the note says why


def test_published_tokens_per_second_rows_are_read(runs: Path, tmp_path: Path) -> None:
    published = tmp_path / "summary.csv"
    published.write_text(
        "Organization,SystemName,Model,Scenario,Result,Units,errors,version\n"
        "Acme,box,llama3.1-8b,Offline,\"12,345.6\",Tokens/s,0,v6.0\n"
        "Acme,box,llama3.1-8b,Server,9876.5,Tokens/s,0,v6.0\n"
        "Acme,box,llama3.1-8b,Interactive,5432.1,Tokens/s,0,v6.0\n"
        "Acme,box,resnet,Offline,40000,Samples/s,0,v6.0\n")
    proc = mlharness("compare", str(published), str(runs), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    group = "Acme box (v6.0)"
    assert data["groups"][0] == group
    mine = data["cells"][group]
    assert mine["llama3.1-8b/Offline"]["value"] == 12345.6
    assert mine["llama3.1-8b/Interactive"] == {**mine["llama3.1-8b/Interactive"],
                                                "value": 5432.1, "unit": "Tokens/s"}
    assert mine["resnet50/Offline"]["unit"] == ""  # the official Samples/s
    cols = {c["key"]: c["unit"] for c in data["columns"]}
    assert cols["llama3.1-8b/Interactive"] == "Tokens/s" and cols["resnet50/Offline"] == "Samples/s"
    delta = data["deltas"][0]["values"]["llama3.1-8b/Offline"]
    assert delta["percent"] is not None  # tokens/s against tokens/s: compared


def test_report_shows_token_latencies_against_limits(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    proc = mlharness("report", str(runs), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    html = out.read_text()
    assert "Llama3.1-8B Interactive (Tokens/s)" in html
    # every LLM performance run with token latencies (LoadGen logs none for Offline)
    assert html.count("<table class='tokens'>") == 4
    assert "<td>TPOT</td>" in html and "<span class='bad'>over</span>" in html
    assert "<span class='ok'>within</span>" in html
    assert "completed tokens/s" in html
    # the Interactive probe: a tune search plot in % of the nearer token limit
    assert "llama3.1-8b Interactive search" in html and "limit (TTFT, TPOT)" in html
    assert "1 probes in 1 tune session" in html
