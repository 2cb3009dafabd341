"""Catalogue: damaged run records seen by `runs`, `compare` and `report`, and where `report -o`
may write (issue 36 items 1 and 6).

Real demo runs (real LoadGen) are made once; each case copies them, damages one run.json the way
a crash, a full disk or a hand edit would (or points `report -o` somewhere it must not write),
and asserts: the exit code, the damaged run named with the reason (or one error line), the other
runs still shown, no traceback, and no file of a run changed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import pytest

from catalogue_support import assert_clean_error, run_cli, snapshot

INDEX = ("runs/mlharness.sqlite", "runs/mlharness.sqlite-wal", "runs/mlharness.sqlite-shm")


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mlharness.runner import execute
    from mlharness.spec import RunSpec

    runs = tmp_path_factory.mktemp("catalogue-store") / "runs"
    base = dict(benchmark="demo", scenario="Offline", output_dir=runs, min_duration=0,
                min_query_count=300, target_qps=100)
    for spec in (RunSpec(**base, batch_size=8), RunSpec(**base, batch_size=32),
                 RunSpec(benchmark="demo", scenario="Offline", mode="accuracy", output_dir=runs)):
        assert execute(spec).status == "ok"
    return runs


@pytest.fixture
def ws(made: Path, tmp_path: Path, monkeypatch) -> Path:
    shutil.copytree(made, tmp_path / "runs")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def perf_runs(ws: Path) -> list[Path]:
    return sorted(p for p in (ws / "runs" / "demo").iterdir() if "performance" in p.name)


def edit(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def damage(run_json: Path) -> None:
        data = json.loads(run_json.read_text())
        change(data)
        run_json.write_text(json.dumps(data))
    return damage


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[:200])


def _latin1(p: Path) -> None:
    p.write_bytes(p.read_bytes().replace(b'"demo"', b'"d\xe9mo"', 1))


def _folder(p: Path) -> None:  # a folder of the same name where the file was
    p.unlink()
    p.mkdir()
    (p / "run.json").write_text("{}")


def _crash(data: dict) -> None:  # left at "running" by a process that is gone
    data.update(status="running", pid=2 ** 22 + 7, finished=None)


DAMAGES = [
    # (id, damage to the first performance run's run.json, reason fragment, state)
    ("truncated", _truncate, "unreadable run.json", "DAMAGED"),
    ("not-utf8", _latin1, "unreadable run.json", "DAMAGED"),
    ("value-text", edit(lambda d: d["result"].update(value="fast")),
     "result.value: Input should be a valid number", "DAMAGED"),
    ("valid-text", edit(lambda d: d["result"].update(valid="yes")), "result.valid", "DAMAGED"),
    ("latency-text", edit(lambda d: d["result"]["latencies_ms"].update({"p99.00": "slow"})),
     "latencies_ms", "DAMAGED"),
    ("result-a-list", edit(lambda d: d.update(result=[1])), "result", "DAMAGED"),
    ("a-folder-named-run.json", _folder, "unreadable run.json (Is a directory", "DAMAGED"),
    ("crashed", edit(_crash), "never finished", "CRASHED"),
]


def _one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("case", DAMAGES, ids=[c[0] for c in DAMAGES])
def test_a_damaged_run_is_named_and_the_rest_still_shown(case, ws: Path, capsys):
    _, damage, fragment, state = case
    bad, good = perf_runs(ws)
    # the index knew the run before it was damaged: it must notice the change by itself
    assert run_cli(["runs"], capsys).code == 0
    damage(bad / "run.json")
    before = snapshot(ws, skip=INDEX)

    listed = run_cli(["runs"], capsys)
    assert listed.code == 0 and "Traceback" not in listed.out + listed.err, listed.err
    text = _one_line(listed.out)
    assert state in text and fragment in text, text
    assert "3 run(s)" in text  # nothing vanished

    compared = run_cli(["compare", "--format", "md"], capsys)
    assert compared.code == 0, compared.err
    assert good.name in compared.out  # the good run still compared
    note = next(ln for ln in compared.out.splitlines() if "left out" in ln)
    assert bad.name in note and state in note and fragment in note, compared.out

    reported = run_cli(["report", "runs", "-o", "r.html"], capsys)
    assert reported.code == 0, reported.err
    page = (ws / "r.html").read_text()
    assert "Runs not used" in page and bad.name in page and state in page
    (ws / "r.html").unlink()
    assert snapshot(ws, skip=INDEX) == before  # no run file changed


def test_a_repaired_run_json_is_read_again(ws: Path, capsys):
    bad, _ = perf_runs(ws)
    original = (bad / "run.json").read_bytes()
    _truncate(bad / "run.json")
    assert "DAMAGED" in run_cli(["runs"], capsys).out
    (bad / "run.json").write_bytes(original)
    out = _one_line(run_cli(["runs"], capsys).out)
    assert "DAMAGED" not in out and out.count("VALID") == 2, out


def test_an_index_of_the_earlier_schema_is_rebuilt(ws: Path, capsys):
    import sqlite3

    assert run_cli(["runs"], capsys).code == 0
    with sqlite3.connect(ws / "runs" / "mlharness.sqlite") as conn:  # a row an older reader kept
        conn.execute("UPDATE runs SET value = 'fast'")
        conn.execute("PRAGMA user_version = 1")
    conn.close()
    listed = run_cli(["runs"], capsys)
    assert listed.code == 0 and "fast" not in listed.out and "samples/s" in listed.out
    assert not list((ws / "runs").glob("*.corrupt-*"))  # rebuilt in place, not called corrupt


# ---- item 6: where `report -o` may write -----------------------------------------------------
def _first_run(ws: Path) -> str:
    return perf_runs(ws)[0].relative_to(ws).as_posix()


REPORT_OUT = [
    # (id, setup, --output (a function of the workspace), extra flags, fragment)
    ("a-directory", None, lambda ws: "runs", [], "is a directory"),
    ("a-runs-run-json", None, lambda ws: f"{_first_run(ws)}/run.json", [],
     "inside the run directory"),
    ("into-a-run-dir-even-with-force", None, lambda ws: f"{_first_run(ws)}/report.html",
     ["--force"], "inside the run directory"),
    ("a-file-not-a-report", lambda ws: (ws / "notes.txt").write_text("mine"),
     lambda ws: "notes.txt", [], "exists and is not an earlier mlharness report"),
    ("under-a-file", lambda ws: (ws / "notes.txt").write_text("mine"),
     lambda ws: "notes.txt/report.html", [], "is a file, not a directory"),
    ("name-too-long", None, lambda ws: "r" * 300 + ".html", [], "File name too long"),
    ("read-only-place", None, lambda ws: "/sys/mlharness-report.html", [], "Permission denied"),
]


@pytest.mark.parametrize("case", REPORT_OUT, ids=[c[0] for c in REPORT_OUT])
def test_report_output_refused_in_one_line(case, ws: Path, capsys):
    _, setup, output, extra, fragment = case
    if setup:
        setup(ws)
    before = snapshot(ws, skip=INDEX)
    result = run_cli(["report", "runs", "-o", output(ws), *extra], capsys)
    assert_clean_error(result, 2, fragment)
    assert snapshot(ws, skip=INDEX) == before


def test_report_replaces_an_earlier_report_and_other_files_only_with_force(ws: Path, capsys):
    assert run_cli(["report", "runs", "-o", "r.html"], capsys).code == 0
    first = (ws / "r.html").read_text()
    assert first.startswith("<!DOCTYPE html>\n<!-- generated by mlharness report -->")
    assert run_cli(["report", "runs", "-o", "r.html", "--title", "again"], capsys).code == 0
    assert "<h1>again</h1>" in (ws / "r.html").read_text()
    (ws / "notes.txt").write_text("mine")
    assert run_cli(["report", "runs", "-o", "notes.txt", "--force"], capsys).code == 0
    assert "<!-- generated by mlharness report -->" in (ws / "notes.txt").read_text()


def test_compare_of_only_a_damaged_run_says_why(ws: Path, capsys):
    bad, _ = perf_runs(ws)
    _truncate(bad / "run.json")
    before = snapshot(ws, skip=INDEX)
    result = run_cli(["compare", bad.relative_to(ws)], capsys)
    assert_clean_error(result, 2, f"left out demo/{bad.name}: DAMAGED (unreadable run.json")
    assert str(bad) not in result.err  # the reason does not repeat the run's path
    assert snapshot(ws, skip=INDEX) == before


def test_report_leaves_out_a_probe_without_numbers_and_goes_on(ws: Path, capsys):
    # a Server tune probe whose record says "lots" where the plot needs its target QPS
    good = perf_runs(ws)[1]
    probe = ws / "runs" / "_tune" / "demo" / "Server-performance-20260101-000000"
    shutil.copytree(good, probe)
    data = json.loads((probe / "run.json").read_text())
    data["spec"]["scenario"] = "Server"
    data["result"]["effective"]["effective_target_qps"] = "lots"
    (probe / "run.json").write_text(json.dumps(data))
    before = snapshot(ws, skip=INDEX)
    result = run_cli(["report", "runs", "-o", "r.html"], capsys)
    assert result.code == 0 and "Traceback" not in result.out + result.err, result.err
    assert "<h2>Comparison</h2>" in (ws / "r.html").read_text()
    (ws / "r.html").unlink()
    assert snapshot(ws, skip=INDEX) == before


def test_report_replaces_a_page_written_before_the_marker(ws: Path, capsys):
    assert run_cli(["report", "runs", "-o", "old.html"], capsys).code == 0
    page = (ws / "old.html").read_text()
    old = page.replace("<!-- generated by mlharness report -->\n", "", 1)  # as reports were
    (ws / "old.html").write_text(old)
    assert run_cli(["report", "runs", "-o", "old.html"], capsys).code == 0
    assert (ws / "old.html").read_text().count("<!-- generated by mlharness report -->") == 1


def test_report_never_writes_over_one_of_its_sources(ws: Path, capsys):
    (ws / "pub.csv").write_text("Organization,SystemName,Model,Scenario,Result,Units\n"
                                "Org,sys,resnet,Offline,100,Samples/s\n")
    before = snapshot(ws, skip=INDEX)
    result = run_cli(["report", "pub.csv", "-o", "pub.csv", "--force"], capsys)
    assert_clean_error(result, 2, "--output pub.csv is one of the report's sources")
    assert snapshot(ws, skip=INDEX) == before
