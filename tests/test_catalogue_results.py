"""Catalogue: what `compare`, `report`, `runs` and `submit` are given or meet on the way (issue 36
items 7 and 8): published-results CSV files that are not UTF-8, too large or hold HTML, a
submission log with a non-numeric result, names too long, a full disk, unknown benchmark names
and an open-division tree.

Real resnet50 runs (a tiny model on synthetic images, real LoadGen) and a real submission tree
of them are made once; each case asserts the exit code, one line, no traceback, and that no run
or input file changed.
"""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest

from catalogue_support import assert_clean_error, run_cli, snapshot

INDEX = ("runs/mlharness.sqlite", "runs/mlharness.sqlite-wal", "runs/mlharness.sqlite-shm")
HEADER = "Organization,SystemName,Model,Scenario,Result,Units\n"
DETAIL = "open/MyOrg/results/tiny/resnet/Offline/performance/run_1/mlperf_log_detail.txt"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mlharness.runner import execute
    from mlharness.spec import RunSpec
    from mlharness.submission import submit
    from synthetic_vision import make_imagenet, resnet50_onnx

    root = tmp_path_factory.mktemp("catalogue-results")
    data, cache = root / "imagenet", root / "cache"
    make_imagenet(data, count=8, seed=3)
    model = resnet50_onnx(root / "tiny.onnx")
    base = dict(benchmark="resnet50", scenario="Offline", model=model, dataset=data,
                cache_dir=cache, output_dir=root / "runs", valid=False)
    assert execute(RunSpec(**base, target_qps=2000, min_duration=200)).status == "ok"
    assert execute(RunSpec(**base, mode="accuracy")).status == "ok"
    (root / "tiny.json").write_text(json.dumps({"system_name": "tiny"}))
    submit(root / "runs", root / "tree", "MyOrg", "open", "tiny", system_json=root / "tiny.json")
    return root


@pytest.fixture
def ws(made: Path, tmp_path: Path, monkeypatch) -> Path:
    for name in ("runs", "tree", "imagenet"):
        shutil.copytree(made / name, tmp_path / name, symlinks=True)
    shutil.copyfile(made / "tiny.json", tmp_path / "tiny.json")
    shutil.copyfile(made / "tiny.onnx", tmp_path / "tiny.onnx")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _write(name: str, body: bytes):  # type: ignore[no-untyped-def]
    return lambda ws: (ws / name).write_bytes(body)


def _sparse(name: str, size: int):  # type: ignore[no-untyped-def]
    def setup(ws: Path) -> None:
        with (ws / name).open("wb") as fh:
            fh.truncate(size)  # no blocks written: a large file at no cost
    return setup


def _non_numeric_result(ws: Path) -> None:
    log = ws / "tree" / DETAIL
    lines = []
    for line in log.read_text().splitlines(keepends=True):
        if '"key": "result_samples_per_second"' in line:
            head, _, tail = line.partition('"value": ')
            line = head + '"value": "fast", ' + tail.split(", ", 1)[1]
        lines.append(line)
    log.write_text("".join(lines))


LONG = "n" * 300
CASES = [
    # (id, setup, argv, code, fragment)
    ("csv-not-utf8", _write("l1.csv", (HEADER + "Caf\xe9,s,resnet,Offline,1,S\n").encode("latin-1")),
     ["compare", "l1.csv"], 2, "l1.csv is not UTF-8"),
    ("csv-not-utf8-report", _write("l1.csv", (HEADER + "Caf\xe9,s,resnet,Offline,1,S\n")
                                   .encode("latin-1")),
     ["report", "l1.csv", "-o", "r.html"], 2, "l1.csv is not UTF-8"),
    ("csv-field-too-large", _write("big.csv", (HEADER + 'A,"' + "x" * 200_000 +
                                               '",resnet,Offline,1,S\n').encode()),
     ["compare", "big.csv"], 2, "not a readable CSV file"),
    ("csv-too-large", _sparse("huge.csv", 100 * 2**20), ["report", "huge.csv", "-o", "r.html"],
     2, "too large for a results table"),
    ("detail-log-non-numeric", _non_numeric_result, ["compare", "tree"], 2,
     "unreadable result (could not convert string to float: 'fast')"),
    ("detail-log-non-numeric-report", _non_numeric_result, ["report", "tree", "-o", "r.html"], 2,
     "unreadable result"),
    ("compare-name-too-long", None, ["compare", LONG], 2, "File name too long"),
    ("runs-dir-name-too-long", None, ["runs", "--runs-dir", LONG], 2, "File name too long"),
    ("report-name-too-long", None, ["report", "runs", "-o", LONG + ".html"], 2,
     "File name too long"),
    ("run-model-name-too-long", None, ["run", "-b", "demo", "-s", "Offline", "--target-qps", "100",
                                        "--no-progress", "--model", LONG], 2, "File name too long"),
    ("check-name-too-long", None, ["check", LONG], 2, "File name too long"),
    ("calibrate-model-name-too-long", None, ["calibrate", "-b", "demo", "--model", LONG,
                                              "--dataset", "imagenet"], 2, "File name too long"),
    ("submit-output-name-too-long", None, ["submit", "--submitter", "MyOrg", "--division", "open",
                                           "--system", "tiny", "--runs", "runs", "--output", LONG,
                                           "--system-json", "tiny.json"], 2,
     "File name too long"),
    ("runs-unknown-benchmark", None, ["runs", "--benchmark", "resnet"], 2,
     "no benchmark named resnet"),
    ("compare-unknown-benchmark", None, ["compare", "--benchmark", "resnet"], 2,
     "no benchmark named resnet"),
    ("runs-unknown-scenario", None, ["runs", "--scenario", "Ofline"], 2,
     "no scenario named Ofline"),
    ("compare-unknown-scenario", None, ["compare", "--scenario", "Ofline"], 2,
     "no scenario named Ofline"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_results_input_is_one_clear_line(case, ws: Path, capsys):
    _, setup, argv, code, fragment = case
    if setup:
        setup(ws)
    before = snapshot(ws, skip=INDEX)
    result = run_cli(argv, capsys)
    assert_clean_error(result, code, fragment)
    assert snapshot(ws, skip=INDEX) == before
    if "unknown-benchmark" in case[0]:
        assert "did you mean resnet50?" in result.err
    if "unknown-scenario" in case[0]:
        assert "did you mean Offline?" in result.err


def _no_space(*args, **kwargs):  # type: ignore[no-untyped-def]
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_during_report_is_one_line(ws: Path, capsys, monkeypatch):
    import mlharness.cli.report

    monkeypatch.setattr(mlharness.cli.report, "write_text_atomic", _no_space)
    before = snapshot(ws, skip=INDEX)
    result = run_cli(["report", "runs", "-o", "r.html"], capsys)
    assert_clean_error(result, 2, "cannot write the report to r.html: No space left on device")
    assert "free some space" in result.err
    assert snapshot(ws, skip=INDEX) == before


def test_a_full_disk_during_submit_is_one_line(ws: Path, capsys, monkeypatch):
    monkeypatch.setattr(shutil, "copyfile", _no_space)  # the logs are copied into the tree
    runs_before = snapshot(ws / "runs", skip=("mlharness.sqlite", "mlharness.sqlite-wal",
                                               "mlharness.sqlite-shm"))
    result = run_cli(["submit", "--submitter", "MyOrg", "--division", "open", "--system", "tiny",
                      "--runs", "runs", "--output", "out", "--system-json", "tiny.json"], capsys)
    assert_clean_error(result, 2, "No space left on device")
    assert "the disk is full" in result.err
    assert snapshot(ws / "runs", skip=("mlharness.sqlite", "mlharness.sqlite-wal",
                                        "mlharness.sqlite-shm")) == runs_before


def test_compare_cells_carry_no_html_newlines_or_pipes(ws: Path, capsys):
    (ws / "html.csv").write_text(HEADER + '"<b>Evil</b> | Org","two\nlines <script>x</script>",'
                                          "resnet,Offline,100,Samples/s\n"
                                          "Good,sys,resnet,Offline,120,Samples/s\n")
    md = run_cli(["compare", "html.csv"], capsys)
    assert md.code == 0, md.err
    table = [ln for ln in md.out.splitlines() if ln and not ln.startswith(("Delta:", "["))]
    assert len(table) == 5  # head, rule, two groups, Delta: no row broken by a newline
    assert "<" not in md.out and "&lt;script&gt;" in md.out
    evil = next(ln for ln in table if "Evil" in ln)
    assert evil.count(" | ") == 1 and "\\| Org two lines" in evil  # one cell boundary only
    csv_out = run_cli(["compare", "html.csv", "--format", "csv"], capsys)
    assert csv_out.code == 0 and len(csv_out.out.splitlines()) == 4
    assert "<b>Evil</b> | Org two lines <script>x</script>,100.00" in csv_out.out  # CSV: text


def test_an_open_division_tree_has_no_accuracy_miss(ws: Path, capsys):
    opened = run_cli(["compare", "tree"], capsys)
    assert opened.code == 0 and "MyOrg/tiny" in opened.out
    assert "ACCURACY MISS" not in opened.out  # open has no accuracy threshold
    (ws / "tree" / "open").rename(ws / "tree" / "closed")  # the same tree in closed: it misses
    closed = run_cli(["compare", "tree"], capsys)
    assert closed.code == 0 and "ACCURACY MISS" in closed.out
