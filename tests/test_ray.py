"""`mlharness run --backend ray` on a real local Ray head (127.0.0.1, 2 CPUs, no dashboard),
shared by this module: the demo and a ResNet50-shaped benchmark through two actors, and an
actor killed mid-run (fail fast, or restarted with --max-restarts). A run without --ray-address
starts a Ray of its own, whatever stale cluster or token lies around.

Ray keeps state in $HOME/.ray and its temp folder (/tmp/ray): the module points HOME and
RAY_TMPDIR at folders of its own (removed at the end), so it neither reads nor leaves any."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest

from distributed_support import RayHead, only_run_dir, start_run, wait_until
from mlharness.cli.main import main
from mlharness.distributed.ray_replicas import RAY_FOLDER_PREFIX, ray_folder_root
from synthetic_vision import make_imagenet, resnet50_onnx

pytestmark = pytest.mark.slow

ACCURACY_DEMO = "accuracy=97.333%, good=438, total=450"
ACTOR_TITLE = "ray::MlharnessReplica"
LONG_SERVER = ["-s", "Server", "--target-qps", "100", "--min-duration", "4000",
               "--server-latency", "1000"]


@pytest.fixture(scope="module", autouse=True)
def own_ray_state(tmp_path_factory: pytest.TempPathFactory):
    """HOME and Ray's temp folder of this module's own (the temp folder short: Ray's socket paths
    must fit 107 bytes); no RAY_ADDRESS or Ray auth settings from outside."""
    home = tmp_path_factory.mktemp("home")
    ray_tmp = tempfile.mkdtemp(prefix="mlhr-", dir="/tmp")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        mp.setenv("RAY_TMPDIR", ray_tmp)
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        for name in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
            mp.delenv(name, raising=False)
        try:
            yield {"home": home, "ray_tmp": Path(ray_tmp)}
        finally:
            shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory, own_ray_state: dict):
    ray_head = RayHead(tmp_path_factory.mktemp("ray"))
    try:
        ray_head.wait_ready()
        yield ray_head
    finally:
        ray_head.stop()


def ray_flags(head: RayHead, replicas: int = 2) -> list[str]:
    return ["--backend", "ray", "--ray-address", head.address, "--replicas", str(replicas)]


def test_demo_accuracy_through_two_actors(head: RayHead, runs_dir: Path) -> None:
    code = main(["run", "-b", "demo", "--mode", "accuracy", "--no-progress", "--output-dir",
                 str(runs_dir), *ray_flags(head)])
    run = only_run_dir(runs_dir, "demo")
    assert (run / "accuracy.txt").read_text().strip() == ACCURACY_DEMO
    assert code == 0
    data = json.loads((run / "run.json").read_text())
    served = data["distributed"]["samples_served"]
    assert sorted(served) == ["replica-0", "replica-1"]
    assert sum(served.values()) == 450 and all(v > 0 for v in served.values())
    assert data["backend"]["replicas"] == 2 and len(data["backend"]["actors"]) == 2
    assert not head.processes(ACTOR_TITLE) or wait_actors_gone(head)


def test_openvino_actors_start_with_one_malloc_arena(head: RayHead, runs_dir: Path) -> None:
    """Issue 38: an actor running OpenVINO gets MALLOC_ARENA_MAX=1 from its start (Ray's
    runtime environment), as a run's worker takes one arena before its threads."""
    pytest.importorskip("openvino", reason="the openvino extra is not installed")
    code = main(["run", "-b", "demo", "--mode", "accuracy", "--no-progress", "--output-dir",
                 str(runs_dir), *ray_flags(head, replicas=1), "--replica-backend", "openvino"])
    run = only_run_dir(runs_dir, "demo")
    assert code == 0 and (run / "accuracy.txt").read_text().strip() == ACCURACY_DEMO
    actor = json.loads((run / "run.json").read_text())["backend"]["actors"][0]["backend"]
    assert actor["name"] == "openvino"
    assert actor["process"].endswith("MALLOC_ARENA_MAX=1 from its start")
    assert wait_actors_gone(head)


def wait_actors_gone(head: RayHead) -> bool:
    """The run kills its actors at the end (bounded wait)."""
    wait_until(lambda: not head.processes(ACTOR_TITLE), 30, "actors gone")
    return True


def _kill_actor_mid_run(head: RayHead, runs: Path, *flags: str) -> tuple[int, float, Path]:
    wait_actors_gone(head)
    proc = start_run(runs, "-b", "demo", *LONG_SERVER, *ray_flags(head), *flags)
    try:
        wait_until(lambda: len(head.processes(ACTOR_TITLE)) == 2, 90, "two actors up")
        wait_until(lambda: any((p / "mlperf_log_detail.txt").is_file()
                               for p in (runs / "demo").glob("*")), 60, "LoadGen started")
        time.sleep(1.0)  # mid-run
        victim = head.processes(ACTOR_TITLE)[0]
        os.kill(victim, signal.SIGKILL)
        t0 = time.monotonic()
        proc.wait(timeout=120)
        return proc.returncode, time.monotonic() - t0, only_run_dir(runs, "demo")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_killed_actor_fails_the_run_fast(head: RayHead, tmp_path: Path) -> None:
    code, took, run = _kill_actor_mid_run(head, tmp_path / "runs")
    assert code == 3
    assert took < 30.0
    data = json.loads((run / "run.json").read_text())
    assert data["status"] == "failed" and "replica-" in data["error"]["message"]
    assert data["distributed"]["lost"]
    for name in ("user.conf", "mlperf_log_detail.txt", "mlperf_log_summary.txt"):
        assert (run / name).is_file()


def test_killed_actor_is_restarted_with_max_restarts(head: RayHead, tmp_path: Path) -> None:
    code, _, run = _kill_actor_mid_run(head, tmp_path / "runs", "--max-restarts", "1")
    data = json.loads((run / "run.json").read_text())
    assert data["status"] == "ok" and code in (0, 1)  # every query answered; verdict aside
    events = data["distributed"]["events"]
    assert any(e["event"] == "restarted" for e in events), events
    assert data["distributed"]["restarts"] >= 1
    assert any("was restarted" in n for n in data["distributed"]["notes"])
    assert not data["distributed"]["lost"]
    # both actors ran the untimed warm-up batch before LoadGen started
    assert data["sut"]["warmup_batches"] == 1 and data["sut"]["warmup_s"] > 0


def test_resnet50_shaped_through_two_actors_matches_in_process(head: RayHead,
                                                               tmp_path: Path) -> None:
    make_imagenet(tmp_path / "imagenet", count=8)
    resnet50_onnx(tmp_path / "resnet50_v1.onnx")
    common = ["run", "-b", "resnet50", "--model", str(tmp_path / "resnet50_v1.onnx"),
              "--dataset", str(tmp_path / "imagenet"), "--cache-dir", str(tmp_path / "cache"),
              "--mode", "accuracy", "--no-progress", "--batch-size", "2"]
    main([*common, "--output-dir", str(tmp_path / "local")])
    main([*common, "--output-dir", str(tmp_path / "ray"), *ray_flags(head)])
    logs = [json.loads((only_run_dir(tmp_path / d, "resnet50") / "mlperf_log_accuracy.json")
                       .read_text()) for d in ("local", "ray")]
    local, remote = ({e["qsl_idx"]: e["data"] for e in log} for log in logs)
    assert remote == local and len(local) == 8


def test_more_replicas_than_the_cluster_holds_is_refused_before_loadgen(head: RayHead,
                                                                        runs_dir: Path) -> None:
    code = main(["run", "-b", "demo", "--no-progress", "--output-dir", str(runs_dir),
                 *ray_flags(head, replicas=5)])
    assert code == 2  # a bad input, told at once: the head has 2 CPUs
    assert not head.processes(ACTOR_TITLE)


def _own_ray_dirs() -> set[str]:
    return {p.name for p in Path(ray_folder_root()).glob(f"{RAY_FOLDER_PREFIX}*")}


def _left_behind(before: set[str], wait_s: float = 20.0) -> set[str]:
    """The run's own Ray folders still there: those new since ``before`` that no live process
    names. Another run's Ray beside this one (a second suite on the machine) has a folder that
    its processes name, or that goes when it ends: it is waited for, not counted."""
    deadline = time.monotonic() + wait_s
    while True:
        named = " ".join(_command_lines())
        left = {d for d in _own_ray_dirs() - before if d not in named}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def _command_lines() -> list[str]:
    lines = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            lines.append(path.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # the process ended meanwhile
            pass
    return lines


def test_a_run_without_an_address_starts_its_own_ray_past_stale_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> None:
    # what an earlier Ray leaves behind: a current-cluster file naming a head that is gone, an
    # auth token of another cluster in ~/.ray, and RAY_ADDRESS in the environment
    ray_tmp = Path(tempfile.mkdtemp(prefix="mlhr-", dir="/tmp"))  # not the head's
    request.addfinalizer(lambda: shutil.rmtree(ray_tmp, ignore_errors=True))
    monkeypatch.setenv("RAY_TMPDIR", str(ray_tmp))
    stale = ray_tmp / "ray"
    stale.mkdir()
    (stale / "ray_current_cluster").write_text("127.0.0.1:9\n")
    home = tmp_path / "home"  # not the head's: its drivers must not see this token
    monkeypatch.setenv("HOME", str(home))
    token = home / ".ray" / "auth_token"
    token.parent.mkdir(parents=True)
    token.write_text("a-token-of-another-cluster")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")
    before = _own_ray_dirs()
    t0 = time.monotonic()
    # as a new user types it: --replicas alone means Ray actors (it used to answer "unknown
    # onnxruntime backend option: replicas")
    # a stall clock of 180 s, not 60: a loaded machine (load 11) took more than 60 s to start
    # Ray; a join of the stale cluster hangs past it all the same (and past ``took``'s bound)
    code = main(["run", "-b", "demo", "--mode", "accuracy", "--no-progress", "--output-dir",
                 str(tmp_path / "runs"), "--replicas", "2", "--stall-timeout", "180"])
    took = time.monotonic() - t0
    run = only_run_dir(tmp_path / "runs", "demo")
    assert code == 0 and (run / "accuracy.txt").read_text().strip() == ACCURACY_DEMO
    assert took < 240  # generous: joining the stale cluster stalled for 60 s and failed
    # nothing read or left outside the run's own Ray folder, which is gone
    assert token.read_text() == "a-token-of-another-cluster"
    assert [p.name for p in token.parent.iterdir()] == ["auth_token"]
    assert [p.name for p in stale.iterdir()] == ["ray_current_cluster"]
    assert (stale / "ray_current_cluster").read_text() == "127.0.0.1:9\n"
    assert _left_behind(before) == set()


def test_a_ray_start_ended_as_stalled_leaves_no_ray_folder(tmp_path: Path) -> None:
    """A worker killed while its own Ray starts (here a 1 s stall timeout) cannot remove that
    Ray's folder under /tmp: the parent removes it (the folder's name holds the worker's
    process id: under load the kill came before Ray had made its session folder there)."""
    before = _own_ray_dirs()
    code = main(["run", "-b", "demo", "--mode", "accuracy", "--no-progress", "--output-dir",
                 str(tmp_path / "runs"), "--replicas", "2", "--stall-timeout", "1"])
    record = json.loads(only_run_dir(tmp_path / "runs", "demo").joinpath("run.json").read_text())
    assert code == 3 and "no progress while starting the Ray replicas" in \
        record["error"]["message"], (code, record["error"])
    assert _left_behind(before) == set()
