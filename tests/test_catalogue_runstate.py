"""Run-state catalogue (issue 36): a run directory deleted mid-run, a crashed run's pid reused by
another process, a full disk when the record is finished, and SIGHUP to the whole process group.

Each case runs the real CLI on the demo benchmark (real LoadGen) and asserts the exit code, one
line without a traceback, the status in run.json (or that no run.json was recreated) and that
nothing outside the run directory changed.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from catalogue_support import (alive, assert_clean_error, children, cli_subprocess, run_cli,
                               snapshot)
from distributed_support import wait_until
from mlharness import record as record_module
from mlharness.record import read_record, running_state, untrusted_reason

SLOW = "faulty_backends:SlowNoopBackend"


def _run_dirs(runs: Path) -> list[Path]:
    return [p for p in runs.glob("*/*") if p.is_dir()]


def test_a_run_directory_deleted_mid_run_is_not_recreated(tmp_path: Path, capsys, monkeypatch):
    """The directory is deleted while LoadGen runs: the run fails with one line (exit 3), and
    neither the directory nor a run.json saying "ok" comes back."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("untouched")
    (tmp_path / "runs").mkdir()
    before = snapshot(tmp_path, skip=("runs",))
    deleted: list[Path] = []

    def delete_when_logging() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = list((tmp_path / "runs").rglob("mlperf_log_detail.txt"))
            if found:
                deleted.append(found[0].parent)
                shutil.rmtree(found[0].parent)
                return
            time.sleep(0.05)

    deleter = threading.Thread(target=delete_when_logging, daemon=True)
    deleter.start()
    result = run_cli(["run", "-b", "demo", "-s", "Offline", "--backend", SLOW, "--target-qps",
                      "100", "--min-duration", "3000", "--output-dir", "runs", "--no-progress"],
                     capsys)
    deleter.join(timeout=10)
    assert deleted, "the run never started LoadGen"
    assert_clean_error(result, 3, "was deleted while the run was going")
    assert str(deleted[0]) in result.err.replace("\n", "")
    assert not deleted[0].exists()  # not recreated
    assert not list((tmp_path / "runs").rglob("run.json"))
    from mlharness.store.index import open_store

    with open_store(tmp_path / "runs") as store:  # `mlharness runs` lists nothing
        assert store.query(kinds=None) == []
    assert snapshot(tmp_path, skip=("runs",)) == before


def _finished_run(tmp_path: Path, capsys) -> Path:
    result = run_cli(["run", "-b", "demo", "-s", "Offline", "--target-qps", "100",
                      "--min-duration", "200", "--output-dir", str(tmp_path / "runs"),
                      "--no-progress"], capsys)
    assert result.code in (0, 1), result.err
    (run_dir,) = [p.parent for p in (tmp_path / "runs").rglob("run.json")]
    return run_dir


def test_a_crashed_runs_pid_reused_by_another_process_reads_as_crashed(tmp_path: Path, capsys):
    """A record at "running" naming a live pid (this test's own) that started at another time
    is a crashed run, in run.json's readers and in the index; with the right start time it is
    live, and an old record without the start time keeps reading by pid and host."""
    from mlharness.store.index import open_store, run_state

    run_dir = _finished_run(tmp_path, capsys)
    data = json.loads((run_dir / "run.json").read_text())
    assert data["status"] == "ok"
    me = os.getpid()
    start = record_module.process_start(me)
    assert isinstance(start, int) and isinstance(data["pid_start"], int)
    assert data["boot_id"] == record_module.boot_id()

    def as_running(**owner) -> None:
        changed = {**data, "status": "running", "finished": None, **owner}
        changed = {k: v for k, v in changed.items() if v is not None or k not in owner}
        (run_dir / "run.json").write_text(json.dumps(changed))

    def states() -> tuple[str, str, str]:
        rec = read_record(run_dir)
        with open_store(tmp_path / "runs") as store:
            store.record(run_dir)  # the index reads the changed run.json
            rows = [r for r in store.query() if r.status == "running"]
        return running_state(rec), untrusted_reason(run_dir, rec) or "", run_state(rows[0])

    as_running(pid=me, pid_start=start + 1)  # the pid was reused by another process
    state, why, indexed = states()
    assert (state, indexed) == ("dead", "crashed")
    assert "process that died" in why
    as_running(pid=me, pid_start=start, boot_id="another-boot")  # the machine rebooted
    assert states()[0::2] == ("dead", "crashed")
    as_running(pid=me, pid_start=start)  # really this process
    assert states()[0::2] == ("live", "running")
    as_running(pid=me, pid_start=None, boot_id=None)  # an old record: pid and host only
    assert states()[0::2] == ("live", "running")
    assert "still running" in states()[1]


def _full_disk(monkeypatch, times: int | None) -> list[str]:
    """Writes of a finished run.json (not "running") raise ENOSPC: ``times`` times, or always."""
    real = record_module.write_json_atomic
    refused: list[str] = []

    def write(path: Path, data) -> None:
        if data.get("status") != "running" and (times is None or len(refused) < times):
            refused.append(data.get("status"))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, data)

    monkeypatch.setattr(record_module, "write_json_atomic", write)
    return refused


@pytest.mark.parametrize("times", [1, None], ids=["freed-after-one-try", "stays-full"])
def test_a_full_disk_at_the_end_leaves_a_failed_record(tmp_path: Path, capsys, monkeypatch,
                                                       times):
    """The final record cannot be written (ENOSPC): one line naming the disk problem, exit 3,
    and run.json says "failed" (written once more, or in place over the old record when atomic
    writes keep failing), never "running"; the logs are kept."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("untouched")
    before = snapshot(tmp_path)
    refused = _full_disk(monkeypatch, times)
    result = run_cli(["run", "-b", "demo", "-s", "Offline", "--target-qps", "100",
                      "--min-duration", "200", "--output-dir", "runs", "--no-progress"], capsys)
    assert refused[0] == "ok"
    assert len(refused) == (1 if times else 2)  # stays full: the retry was refused too
    assert_clean_error(result, 3, "No space left on device")
    assert "could not be saved" in result.err
    assert "run.json records the run as failed" in result.err
    (run_dir,) = [p.parent for p in (tmp_path / "runs").rglob("run.json")]
    rec = read_record(run_dir)
    assert rec.status == "failed"
    assert rec.error is not None and "No space left on device" in rec.error.message
    assert rec.to_dict()["error"]["errno"] == errno.ENOSPC  # kept as the runner wrote it
    assert "status 'failed'" in untrusted_reason(run_dir, rec)
    assert (run_dir / "mlperf_log_detail.txt").is_file()  # logs kept
    assert not list(run_dir.glob(".run.json.*"))  # no temporary file left behind
    assert snapshot(tmp_path, skip=("runs",)) == before


def test_a_full_disk_while_writing_the_accuracy_is_a_failed_run(tmp_path: Path, capsys,
                                                                monkeypatch):
    """accuracy.txt cannot be written (ENOSPC): exit 3, one line, run.json "failed"."""
    import importlib

    execute_module = importlib.import_module("mlharness.runner.execute")

    def full(path: Path, text: str) -> None:
        if Path(path).name == "accuracy.txt":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, text)

    real = execute_module.write_text_atomic
    monkeypatch.setattr(execute_module, "write_text_atomic", full)
    monkeypatch.chdir(tmp_path)
    result = run_cli(["run", "-b", "demo", "-s", "Offline", "--mode", "accuracy",
                      "--max-samples", "20", "--output-dir", "runs", "--no-progress"], capsys)
    assert_clean_error(result, 3, "No space left on device")
    assert "accuracy.txt" in result.err
    (run_dir,) = [p.parent for p in (tmp_path / "runs").rglob("run.json")]
    rec = read_record(run_dir)
    assert rec.status == "failed" and rec.error is not None
    assert "No space left on device" in rec.error.message
    assert (run_dir / "mlperf_log_accuracy.json").is_file()


@pytest.mark.slow
def test_sighup_to_the_process_group_ends_like_sighup_to_the_parent(tmp_path: Path):
    """The CLI in a session of its own, SIGHUP to every process of the group (a closed
    terminal): exit 129, "interrupted by SIGHUP", logs kept, no traceback (before, the resource
    tracker died of it and its replacement printed tracebacks), no worker left behind."""
    root = tmp_path / "work"
    root.mkdir()
    (root / "keep.txt").write_text("untouched")
    before = snapshot(root)
    proc = cli_subprocess(["run", "-b", "demo", "--backend", SLOW, "--target-qps", "100",
                           "--min-duration", "60000", "--output-dir", "runs", "--no-progress"],
                          cwd=root, start_new_session=True)
    try:
        wait_until(lambda: any((root / "runs").rglob("mlperf_log_detail.txt")), 120,
                  "the run to start LoadGen")
        workers = children(proc.pid)
        assert workers
        os.killpg(proc.pid, signal.SIGHUP)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGHUP, (proc.returncode, err)
    assert "Traceback" not in out + err, err
    assert "interrupted by SIGHUP" in err
    assert [ln for ln in err.splitlines() if ln.strip()] == [ln for ln in err.splitlines()
                                                             if "interrupted by SIGHUP" in ln]
    (run_dir,) = _run_dirs(root / "runs")
    rec = json.loads((run_dir / "run.json").read_text())
    assert (rec["status"], rec["error"]["message"]) == ("interrupted", "interrupted by SIGHUP")
    assert (run_dir / "mlperf_log_detail.txt").is_file()
    for pid in workers:
        wait_until(lambda pid=pid: not alive(pid), 10, f"worker {pid} to end")
    assert snapshot(root, skip=("runs",)) == {k: v for k, v in before.items()
                                              if not k.startswith("runs")}
