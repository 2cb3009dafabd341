"""Catalogue: numbers beyond what LoadGen and the machine can hold, dataset links that leave the
dataset folder, and a result index another process keeps locked (issue 36).

Refusals assert exit 2, one line with the reason, and that nothing was written; the locked index
asserts that the run still finishes, says once that it was not indexed, and loses nothing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from catalogue_support import assert_clean_error, run_cli, snapshot
from test_catalogue_inputs import demo_set

from mlharness import hostinfo
from mlharness.loadgen.settings import max_generated_queries
from mlharness.store import index as store_index

RUN = ["run", "-b", "demo", "--no-progress", "--output-dir", "runs"]

FLAGS = [
    # (id, extra flags, fragment of the reason)
    ("min-query-count-above-uint64", ["--min-query-count", "18446744073709551617"],
     "LoadGen keeps counts as uint64_t"),
    ("max-query-count-above-uint64", ["--max-query-count", str(2**70)],
     "LoadGen keeps counts as uint64_t"),
    ("min-duration-above-int64-ns", ["--min-duration", "99999999999999999999"],
     "LoadGen turns ms into int64 nanoseconds"),
    ("set-max-duration-above-int64-ns", ["--set", "max_duration=99999999999999999999"],
     "int64 nanoseconds"),
    ("set-count-above-uint64", ["--set", f"max_async_queries={2**65}"], "uint64_t"),
    ("performance-sample-count-above-uint64", ["--performance-sample-count", str(2**64)],
     "uint64_t"),
    ("target-latency-above-int64-ns", ["-s", "SingleStream", "--target-latency", "1e13"],
     "int64 nanoseconds"),
    ("server-latency-above-int64-ns", ["-s", "Server", "--server-latency", "1e13"],
     "int64 nanoseconds"),
    ("batch-size-1e8", ["-s", "Offline", "--batch-size", "100000000"],
     "a batch is stacked into one array in memory"),
    ("workers-100000", ["--workers", "100000"], "each worker is a thread"),
    ("instances-100000", ["--instances", "100000"], "each instance is a thread"),
    ("threads-100000", ["--threads", "100000"], "a runtime starts each thread"),
    ("threads-per-instance-2000", ["--threads-per-instance", "2000"],
     "a runtime starts each thread"),
]

TOMLS = [
    ("toml-min-duration-1e20", "min_duration = 99999999999999999999\n",
     "LoadGen turns ms into int64 nanoseconds"),
    ("toml-min-query-count-2-64", "min_query_count = 18446744073709551616\n", "uint64_t"),
]


def _refused(tmp_path: Path, capsys, argv: list[str], fragment: str) -> None:
    before = snapshot(tmp_path)
    result = run_cli(argv, capsys)
    assert_clean_error(result, 2, fragment)
    assert snapshot(tmp_path) == before
    assert not (tmp_path / "runs").exists()  # refused before a run directory was made


@pytest.mark.parametrize("case", FLAGS, ids=[c[0] for c in FLAGS])
def test_numbers_beyond_loadgen_are_refused_with_the_reason(case, tmp_path: Path, capsys,
                                                            monkeypatch) -> None:
    _, extra, fragment = case
    monkeypatch.chdir(tmp_path)
    _refused(tmp_path, capsys, [*RUN, *extra], fragment)


@pytest.mark.parametrize("case", TOMLS, ids=[c[0] for c in TOMLS])
def test_toml_numbers_beyond_loadgen_are_refused(case, tmp_path: Path, capsys,
                                                 monkeypatch) -> None:
    _, body, fragment = case
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.toml").write_text(f'benchmark = "demo"\n{body}')
    _refused(tmp_path, capsys, ["run", "--config", "run.toml", "--no-progress", "--output-dir",
                                "runs"], fragment)


@pytest.mark.parametrize("scenario", ["SingleStream", "Offline"])
def test_a_query_count_beyond_memory_is_refused_before_anything_runs(
        scenario: str, tmp_path: Path, capsys, monkeypatch) -> None:
    """LoadGen builds all min_query_count queries up front (300 M: ~138 GB at 460 bytes each):
    refused against the memory available (here said to be 8 GB, so the case does not depend on
    this machine), the estimate targets are fitted with, before any probe runs."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(hostinfo, "available_memory_bytes", lambda: 8 * 2**30)
    assert max_generated_queries() < 300_000_000
    _refused(tmp_path, capsys, [*RUN, "-s", scenario, "--min-query-count", "300000000"],
             "--min-query-count 300000000 makes LoadGen build about 300 M queries")


def test_a_dataset_image_linked_outside_the_folder_is_refused(tmp_path: Path, capsys,
                                                              monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    data = demo_set(tmp_path)
    secret = tmp_path / "elsewhere" / "secret.png"
    secret.parent.mkdir()
    first = sorted(data.glob("*.png"))[0]
    secret.write_bytes(first.read_bytes())
    first.unlink()
    first.symlink_to(secret)
    _refused(tmp_path, capsys, [*RUN, "--dataset", "digits", "-s", "SingleStream", "--target-latency", "1"],
             "links that leave the dataset folder")


def test_a_link_inside_the_dataset_folder_is_used(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    data = demo_set(tmp_path)
    first = sorted(data.glob("*.png"))[0]
    (data / "sub").mkdir()
    first.rename(data / "sub" / first.name)
    first.symlink_to(Path("sub") / first.name)
    result = run_cli([*RUN, "--dataset", "digits", "-s", "SingleStream", "--target-latency", "1", "--min-duration",
                      "100"], capsys)
    assert result.code in (0, 1), result.err


def test_a_link_folder_made_by_get_from_is_used(tmp_path: Path, capsys, monkeypatch) -> None:
    """``mlharness get --from DIR`` with imagenet-aux makes a folder of links into DIR
    (artefacts/adopt.py); its stamp names DIR, so those links are the user's images, not an
    escape."""
    from types import SimpleNamespace

    from mlharness.artefacts.adopt import _imagenet_from_aux
    from mlharness.artefacts.cache import write_stamp

    monkeypatch.chdir(tmp_path)
    mine = demo_set(tmp_path, "mine")
    (mine / "val_map.txt").rename(tmp_path / "val.txt")  # caffe's val.txt, beside
    dest = tmp_path / "cache" / "imagenet"
    dest.parent.mkdir()
    _imagenet_from_aux(mine, tmp_path / "val.txt", dest, expected=3)
    assert all(p.is_symlink() for p in dest.glob("*.png"))
    write_stamp(dest, SimpleNamespace(name="imagenet"), "unverified", source=f"--from {mine}")
    result = run_cli([*RUN, "--dataset", str(dest), "-s", "SingleStream", "--target-latency",
                      "1", "--min-duration", "100"], capsys)
    assert result.code in (0, 1), result.err
    (dest.parent / f".{dest.name}.verified.json").unlink()  # without the stamp: refused
    shutil.rmtree(tmp_path / "runs")
    _refused(tmp_path, capsys, [*RUN, "--dataset", str(dest), "-s", "SingleStream",
                                "--target-latency", "1"], "links that leave the dataset folder")


LOCKER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
"""


def test_a_locked_index_never_holds_up_a_run(tmp_path: Path, capsys, monkeypatch) -> None:
    """Another process holds the index with BEGIN EXCLUSIVE: the run waits at most the short
    busy timeout, finishes, says once that it is not indexed; reindex adds it afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(store_index, "RUN_BUSY_TIMEOUT_S", 0.2)
    store_index.Store(tmp_path / "runs").close()  # an index in WAL mode, as runs leave it
    index = tmp_path / "runs" / "mlharness.sqlite"
    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(index)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout.readline().strip() == "locked"
        result = run_cli([*RUN, "-s", "SingleStream", "--target-latency", "1",
                          "--min-duration", "100"], capsys)
    finally:
        locker.communicate("")
    assert result.code in (0, 1), result.err
    assert result.err.count("is not in the index") == 1, result.err
    assert "runs reindex" in result.err
    runs = [p.parent for p in (tmp_path / "runs").rglob("run.json")]
    assert len(runs) == 1
    assert json.loads((runs[0] / "run.json").read_text())["status"] == "ok"
    assert (runs[0] / "mlperf_log_detail.txt").is_file()
    assert index.is_file() and not list(index.parent.glob("*.corrupt-*"))  # kept, not replaced
    with store_index.Store(tmp_path / "runs") as store:  # opened without syncing: not in it
        assert store.query() == []
    store_index._not_indexed.clear()
    assert run_cli(["runs", "reindex", "--runs-dir", "runs"], capsys).code == 0
    with store_index.open_store(tmp_path / "runs") as store:
        assert [r.path for r in store.query()] == [runs[0].relative_to(tmp_path / "runs")
                                                      .as_posix()]


def test_runs_and_compare_on_a_locked_index_read_the_directories_with_one_note(
        tmp_path: Path, capsys, monkeypatch) -> None:
    """`runs` and `compare` wait the same short time as a run (RUN_BUSY_TIMEOUT_S), then read
    the run directories instead, with one note each, and leave the index alone; `runs reindex`
    cannot rebuild it then and says so (exit 2). Before, they waited about 50 min in silence."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(store_index, "RUN_BUSY_TIMEOUT_S", 0.2)
    result = run_cli([*RUN, "-s", "SingleStream", "--target-latency", "1",
                      "--min-duration", "100"], capsys)
    assert result.code in (0, 1), result.err
    index = tmp_path / "runs" / "mlharness.sqlite"
    before = index.read_bytes()
    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(index)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout.readline().strip() == "locked"
        listed = run_cli(["runs", "--runs-dir", "runs"], capsys)
        store_index._read_around.clear()  # once a process: each command is one
        compared = run_cli(["compare", "--runs-dir", "runs"], capsys)
        rebuilt = run_cli(["runs", "reindex", "--runs-dir", "runs"], capsys)
    finally:
        locker.communicate("")
        store_index._read_around.clear()
    for shown in (listed, compared):
        assert shown.code == 0, shown.err
        assert shown.err.count("is locked by another process") == 1, shown.err
        assert "reads the run directories instead" in shown.err
    assert "1 run(s)" in listed.out and "SingleStream" in listed.out
    assert "demo" in compared.out
    assert_clean_error(rebuilt, 2, "is locked by another process")
    assert index.read_bytes() == before and not list(index.parent.glob("*.corrupt-*"))
