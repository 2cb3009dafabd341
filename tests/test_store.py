"""The result store: every run indexed as it ends, rebuilt from the run directories when the
index is missing or corrupt, concurrent writers, crashed runs never trusted."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlharness.store import INDEX_NAME, IndexedRun, RunRow, Store, find_run_dirs, open_store, record_run
from store_support import demo_runs, mlharness


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_runs(tmp_path_factory)


def _rows(root: Path, **kw) -> dict[str, IndexedRun]:  # type: ignore[no-untyped-def]
    with open_store(root) as store:
        return {r.path: r for r in store.query(kinds=None, **kw)}


def test_every_run_is_recorded_when_it_ends(runs: Path) -> None:
    # the runner's hook wrote these rows; nothing was reindexed yet
    with sqlite3.connect(runs / INDEX_NAME) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        paths = {r[0] for r in conn.execute("SELECT path FROM runs WHERE status = 'ok'")}
    on_disk = {d.relative_to(runs).as_posix() for d in find_run_dirs(runs)}
    # runs, accuracy runs and the _tune probes (plus any probe a run made to measure its target)
    assert len(on_disk) >= 7 and paths == on_disk


def test_row_holds_what_run_json_holds(runs: Path) -> None:
    rows = _rows(runs)
    offline8 = next(r for r in rows.values() if r.mode == "performance"
                    and r.scenario == "Offline" and r.batch_size == 8)
    data = json.loads((runs / offline8.path / "run.json").read_text())
    assert offline8.kind == "run" and offline8.state == "ok"
    assert offline8.value == data["result"]["value"] and offline8.metric == data["result"]["metric"]
    assert offline8.valid is data["result"]["valid"] is True
    assert offline8.backend == "onnxruntime" and offline8.precision == "fp32"
    assert offline8.system == data["system"]["hostname"]
    assert offline8.versions["mlcommons-loadgen"] == "6.0.17"
    assert offline8.started == data["started"] and offline8.finished == data["finished"]
    assert offline8.round == "v6.1"  # from the LoadGen seeds in the detail log
    repo = Path(__file__).resolve().parent.parent
    if (repo / ".git").exists():  # the demo model ships in this checkout: its commit is kept
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        assert data["model_git_commit"] == offline8.model_git_commit == head
    assert offline8.settings["spec"]["batch_size"] == 8 and len(offline8.settings_hash) == 16
    assert "--batch-size 8" in offline8.command and offline8.command.startswith("mlharness run")
    acc = next(r for r in rows.values() if r.mode == "accuracy")
    assert acc.accuracy_metric and acc.accuracy > 50 and acc.accuracy_passed is True
    acc_data = json.loads((runs / acc.path / "run.json").read_text())["accuracy"]
    assert acc.accuracy_target == acc_data["target"] and acc.accuracy == acc_data["value"]
    probes = [r for r in rows.values() if r.kind == "probe"]
    assert len([p for p in probes if p.scenario == "Server"]) >= 2
    assert all(p.path.startswith("_tune/") for p in probes)
    # same settings -> same hash; another batch size -> another hash
    offline32 = next(r for r in rows.values() if r.mode == "performance"
                     and r.scenario == "Offline" and r.batch_size == 32)
    assert offline32.settings_hash != offline8.settings_hash


def test_reindex_rebuilds_a_deleted_index_with_nothing_missing(runs: Path, tmp_path: Path) -> None:
    copy = tmp_path / "runs"
    shutil.copytree(runs, copy)
    before = _rows(copy)
    for f in copy.glob(INDEX_NAME + "*"):
        f.unlink()
    proc = mlharness("runs", "reindex", "--runs-dir", str(copy))
    count = len(list(find_run_dirs(copy)))
    assert proc.returncode == 0 and f"indexed {count} run directories" in proc.stdout, proc.stdout
    assert len(before) == count
    after = _rows(copy)
    fields = RunRow.__dataclass_fields__  # what run.json holds; not the bookkeeping columns
    strip = lambda rows: {p: {k: getattr(r, k) for k in fields}  # noqa: E731
                          for p, r in rows.items()}
    assert strip(after) == strip(before)


def test_corrupt_index_is_rebuilt_not_trusted(runs: Path, tmp_path: Path) -> None:
    copy = tmp_path / "runs"
    shutil.copytree(runs, copy, ignore=shutil.ignore_patterns(INDEX_NAME + "*"))
    (copy / INDEX_NAME).write_bytes(b"this is not an SQLite file" * 100)
    proc = mlharness("runs", "--all", "--json", "--runs-dir", str(copy))
    assert proc.returncode == 0, proc.stderr
    count = len(list(find_run_dirs(copy)))
    assert len(json.loads(proc.stdout)) == count >= 7
    assert list(copy.glob(INDEX_NAME + ".corrupt-*"))  # kept aside for inspection
    # a stale index (a run directory removed, one added behind its back) is brought up to date
    gone = next(d for d in find_run_dirs(copy) if "SingleStream" in d.name)
    shutil.move(gone, tmp_path / "elsewhere")
    assert len(_rows(copy)) == count - 1


def test_runs_filters_and_json(runs: Path) -> None:
    proc = mlharness("runs", "--runs-dir", str(runs), "--scenario", "offline", "--json")
    rows = json.loads(proc.stdout)
    assert proc.returncode == 0 and len(rows) == 4 and {r["scenario"] for r in rows} == {"Offline"}
    assert all(r["kind"] == "run" for r in rows)  # probes only with --all
    valid = json.loads(mlharness("runs", "--runs-dir", str(runs), "--valid", "--json").stdout)
    assert valid and all(r["state"] == "ok" for r in valid)
    future = json.loads(mlharness("runs", "--runs-dir", str(runs), "--since", "2999-01-01",
                                  "--json").stdout)
    assert future == []
    table = mlharness("runs", "--runs-dir", str(runs), "--benchmark", "demo").stdout
    assert "SingleStream" in table and "VALID" in table and "5 run(s)" in table


def test_query_returns_typed_rows_with_their_live_state(runs: Path, tmp_path: Path) -> None:
    from mlharness.record import process_start

    root = tmp_path / "runs"
    src = next(d for d in find_run_dirs(runs) if d.name.startswith("Offline-performance"))
    owners = {"finished": None,  # as the run left it
              "crashed": {"pid": os.getpid(), "host": "another-host"},
              "running": {"pid": os.getpid(), "host": socket.gethostname(),
                          "pid_start": process_start(os.getpid()), "boot_id": None}}
    for name, owner in owners.items():
        dst = root / "demo" / f"{src.name}-{name}"
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("mlperf_log_trace.json"))
        if owner is not None:
            data = json.loads((dst / "run.json").read_text())
            data.update(status="running", error=None, **owner)
            (dst / "run.json").write_text(json.dumps(data))
    rows = {r.path.rsplit("-", 1)[1]: r for r in _rows(root).values()}
    assert all(isinstance(r, IndexedRun) for r in rows.values())
    done = rows["finished"]
    assert (done.status, done.state, done.reasons) == ("ok", "ok", [])
    assert done.valid is True and isinstance(done.versions, dict) and done.versions
    assert isinstance(done.settings["spec"], dict) and isinstance(done.run_json_size, int)
    crashed, running = rows["crashed"], rows["running"]
    assert (crashed.status, crashed.state) == ("running", "crashed")
    assert crashed.reasons == ["left at 'running' by a process that died (crash or SIGKILL): "
                               "never finished"]
    assert (running.status, running.state, running.reasons) == ("running", "running", [])


def _record_many(root: str, dirs: list[str], barrier) -> None:  # type: ignore[no-untyped-def]
    barrier.wait()
    for d in dirs:
        record_run(Path(d))


def test_two_processes_recording_at_the_same_moment_both_land(runs: Path, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    src = next(d for d in find_run_dirs(runs) if "SingleStream" in d.name)
    dirs = []
    for i in range(40):  # 40 copies of a real run directory, under distinct names
        dst = root / "demo" / f"{src.name}-copy{i}"
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("mlperf_log_trace.json"))
        dirs.append(str(dst))
    Store(root).close()  # an empty index exists
    with sqlite3.connect(root / INDEX_NAME) as conn:
        conn.execute("DELETE FROM runs")
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_record_many, args=(str(root), dirs[i::2], barrier))
             for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with sqlite3.connect(root / INDEX_NAME) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 40


def test_a_killed_run_is_marked_crashed_never_trusted(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    # Server issues queries on a schedule: the run lasts its min duration however fast the machine
    proc = subprocess.Popen([sys.executable, "-m", "mlharness.cli.main", "run", "-b", "demo",
                             "-s", "Server", "--target-qps", "50", "--min-duration", "120000",
                             "--output-dir", str(root), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not list(find_run_dirs(root)) or not (root / INDEX_NAME).exists():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        time.sleep(1.0)
        rows = _rows(root)
        assert [r.state for r in rows.values()] == ["running"]  # its process is alive
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole run: parent and LoadGen child
        proc.wait(30)
    rows = list(_rows(root).values())
    assert rows[0].status == "running" and rows[0].state == "crashed"
    assert _rows(root, valid=True) == {}
    table = mlharness("runs", "--runs-dir", str(root)).stdout
    assert "CRASHED" in table
    # after a reindex it is still not trusted
    mlharness("runs", "reindex", "--runs-dir", str(root))
    assert [r.state for r in _rows(root).values()] == ["crashed"]


def test_reproduce_command_repeats_the_same_settings(runs: Path, tmp_path: Path) -> None:
    import shlex

    row = next(r for r in _rows(runs).values() if r.kind == "run"
               and r.mode == "performance" and r.batch_size == 8)
    argv = shlex.split(row.command)
    assert argv[:2] == ["mlharness", "run"]
    proc = mlharness(*argv[1:], "--output-dir", str(tmp_path / "again"), "--no-progress")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    again = list(_rows(tmp_path / "again").values())
    assert len(again) == 1 and again[0].settings_hash == row.settings_hash
    assert again[0].command == row.command


def test_reproduce_command_keeps_the_instances() -> None:
    import shlex

    from mlharness.cli.main import build_parser
    from mlharness.spec import RunSpec
    from mlharness.store.row import reproduce_command

    spec = RunSpec(benchmark="demo", instances=2, threads_per_instance=1, batch_size=4)
    argv = shlex.split(reproduce_command(spec.model_dump(mode="json")))
    args = build_parser().parse_args(argv[1:])
    assert (args.instances, args.threads_per_instance, args.batch_size) == (2, 1, 4)
    tuned = RunSpec(benchmark="demo", scenario="Server", sut_conf={"target_qps": 1234.5})
    argv = shlex.split(reproduce_command(tuned.model_dump(mode="json")))
    assert build_parser().parse_args(argv[1:]).target_qps == 1234.5  # pinned, not --sut


def test_a_run_nested_in_another_run_is_part_of_it(runs: Path, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    outer = root / "demo" / "Offline-power-1"
    src = next(d for d in find_run_dirs(runs) if "SingleStream" in d.name)
    shutil.copytree(src, outer, ignore=shutil.ignore_patterns("mlperf_log_trace.json"))
    inner = outer / "loadgen" / "demo" / src.name
    shutil.copytree(src, inner, ignore=shutil.ignore_patterns("mlperf_log_trace.json"))
    record_run(inner)
    assert not list(outer.rglob(INDEX_NAME))
    record_run(outer)
    assert list(_rows(root)) == ["demo/Offline-power-1"]
