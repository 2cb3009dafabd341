"""`mlharness serve` nodes and `mlharness run --backend remote` on loopback: real servers, the real
LoadGen, the demo and a ResNet50-shaped benchmark; a node killed, stalled, drained and sent
malformed requests. No verdict or speed is asserted: only what the design promises."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from distributed_support import (NodeProcess, http, only_run_dir, start_nodes, start_run,
                                 wait_until)
from mlharness.cli.main import main
from mlharness.cli.render import console
from mlharness.cli.run import show_record
from mlharness.loadgen.mllog import parse_detail_log
from mlharness.record import RunRecord
from mlharness.rules import load as load_rules
from mlharness.submission.check import performance_problems
from synthetic_squad import make_bert_onnx, make_squad, make_vocab, vocab_size
from synthetic_vision import make_imagenet, resnet50_onnx

pytestmark = pytest.mark.slow

ACCURACY_DEMO = "accuracy=97.333%, good=438, total=450"
# a Server run long enough to hurt a node in the middle of it (rate low enough for any machine);
# after the hurt LoadGen finishes its 4 s on its own, so every log is written
LONG_SERVER = ["-s", "Server", "--target-qps", "100", "--min-duration", "4000",
               "--server-latency", "1000"]
FAIL_FAST_S = 30.0  # the promise: a lost node ends the run within 30 s


@pytest.fixture(scope="module")
def demo_nodes(tmp_path_factory: pytest.TempPathFactory):
    nodes = start_nodes(tmp_path_factory.mktemp("nodes"), 2, "demo")
    yield nodes
    for node in nodes:
        node.stop()


def endpoints(nodes: list[NodeProcess]) -> list[str]:
    return [a for n in nodes for a in ("--endpoint", n.url)]


def test_demo_accuracy_through_two_nodes(demo_nodes, runs_dir: Path) -> None:
    code = main(["run", "-b", "demo", "--mode", "accuracy", "--no-progress", "--output-dir",
                 str(runs_dir), "--backend", "remote", *endpoints(demo_nodes)])
    run = only_run_dir(runs_dir, "demo")
    # the same responses as in-process: the shipped model scores exactly this
    assert (run / "accuracy.txt").read_text().strip() == ACCURACY_DEMO
    assert code == 0
    data = json.loads((run / "run.json").read_text())
    served = data["distributed"]["samples_served"]
    assert sorted(served) == sorted(n.url for n in demo_nodes)
    assert sum(served.values()) == 450 and all(v > 0 for v in served.values())
    assert data["backend"]["name"] == "remote" and len(data["backend"]["nodes"]) == 2
    detail = (run / "mlperf_log_detail.txt").read_text()
    assert '"sut_name", "value": "mlharness Network SUT: ' in detail


@pytest.mark.parametrize("scenario,flags", [
    ("SingleStream", ["--target-latency", "1"]),
    ("Server", ["--target-qps", "100", "--server-latency", "1000"]),
])
def test_demo_performance_through_nodes(demo_nodes, runs_dir: Path, scenario: str,
                                        flags: list[str]) -> None:
    before = {n.url: n.stats()["samples"] for n in demo_nodes}
    code = main(["run", "-b", "demo", "-s", scenario, "--no-progress", "--output-dir",
                 str(runs_dir), "--backend", "remote", *endpoints(demo_nodes), *flags])
    data = json.loads((only_run_dir(runs_dir, "demo") / "run.json").read_text())
    assert data["status"] == "ok" and code in (0, 1)  # the verdict depends on this machine
    assert data["result"]["scenario"] == scenario and data["result"]["value"] > 0
    served = data["distributed"]["samples_served"]
    assert sum(served.values()) > 0
    # every node ran the untimed warm-up batch on top of what it served LoadGen
    sut = data["sut"]
    assert sut["warmup_batches"] == 1 and sut["warmup_s"] > 0
    warm = 1 if sut["inline"] else sut["max_batch"]
    for node in demo_nodes:
        assert node.stats()["samples"] - before[node.url] == served[node.url] + warm
        assert node.stats()["loaded"] == 0  # the warm-up's sample and LoadGen's are unloaded


def test_malformed_requests_are_refused_and_the_node_keeps_serving(demo_nodes) -> None:
    url = demo_nodes[0].url
    cases = [
        ("POST", "/predict", b""),  # no indices
        ("POST", "/predict", b"\x01\x02\x03"),  # not a whole int64
        ("POST", "/predict", np.array([0, 450], "<i8").tobytes()),  # out of range
        ("POST", "/predict", np.array([-1], "<i8").tobytes()),
        ("POST", "/load", b"garbage!x"),
    ]
    for method, path, body in cases:
        code, text = http(method, url + path, body)
        assert code == 400, (path, body, code, text)
    assert http("GET", url + "/predict")[0] == 405
    assert http("GET", url + "/nothing")[0] == 404
    code, body = http("POST", url + "/predict", np.array([3, 4], "<i8").tobytes())
    assert code == 200
    lengths = np.frombuffer(body[:16], "<i8")
    assert len(body) == 16 + int(lengths.sum())  # int64 labels, one per sample
    assert http("GET", url + "/ready")[0] == 200


def _hurt_mid_run(tmp_path: Path, hurt: str, *flags: str) -> tuple[int, float, Path, list]:
    """Start two nodes and a long Server run; ``hurt`` node 0 once it has served; return the
    run's exit code, the seconds from the hurt to the run's end, its run dir and the nodes."""
    nodes = start_nodes(tmp_path, 2, "demo")
    runs = tmp_path / "runs"
    try:
        proc = start_run(runs, "-b", "demo", *LONG_SERVER, "--backend", "remote",
                         *endpoints(nodes), *flags)
        try:
            wait_until(lambda: nodes[0].stats().get("samples", 0) > 20, 60, "node 0 serving")
            if hurt == "kill":
                nodes[0].proc.kill()
            elif hurt == "stall":
                nodes[0].proc.send_signal(signal.SIGSTOP)
            else:
                nodes[0].proc.terminate()
            t0 = time.monotonic()
            proc.wait(timeout=90)
            took = time.monotonic() - t0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        return proc.returncode, took, only_run_dir(runs, "demo"), nodes
    finally:
        for node in nodes:
            node.stop()


def _assert_logs_kept(run: Path) -> dict:
    for name in ("user.conf", "run.json", "mlperf_log_detail.txt", "mlperf_log_summary.txt"):
        assert (run / name).is_file(), name
    return json.loads((run / "run.json").read_text())


def test_killed_node_ends_the_run_fast_naming_it(tmp_path: Path) -> None:
    code, took, run, nodes = _hurt_mid_run(tmp_path, "kill")
    assert code == 3
    assert took < FAIL_FAST_S
    data = _assert_logs_kept(run)
    assert data["status"] == "failed"
    assert nodes[0].url in data["error"]["message"]
    assert nodes[0].url in data["distributed"]["lost"]


def test_stalled_node_ends_the_run_fast_naming_it(tmp_path: Path) -> None:
    code, took, run, nodes = _hurt_mid_run(tmp_path, "stall", "--request-timeout", "3")
    assert code == 3
    assert took < FAIL_FAST_S
    data = _assert_logs_kept(run)
    assert nodes[0].url in data["error"]["message"] and "stalled" in data["error"]["message"]


def test_failover_reissues_a_killed_nodes_samples(tmp_path: Path) -> None:
    code, _, run, nodes = _hurt_mid_run(tmp_path, "kill", "--failover")
    data = _assert_logs_kept(run)
    assert data["status"] == "ok" and code in (0, 1)  # every query answered, verdict aside
    dist = data["distributed"]
    assert dist["failed_over"] is True and nodes[0].url in dist["lost"]
    assert dist["samples_served"][nodes[1].url] > 0
    assert any(e["event"] == "failover" and e["replica"] == nodes[0].url for e in dist["events"])
    # the console says so under the verdict, and an INVALID verdict is not blamed on the target
    assert any(n.startswith(f"failover: node {nodes[0].url} was lost") for n in dist["notes"])
    with console.capture() as shown:
        show_record(RunRecord.from_dict({**data, "result": {**data["result"], "valid": False}}),
                    run)
    assert f"failover: node {nodes[0].url} was lost" in shown.get().replace("\n", " ")
    assert "INVALID with a failover or restart in the run" in shown.get().replace("\n", " ")


def test_sigterm_drains_a_busy_node_and_the_run_fails_over(tmp_path: Path) -> None:
    code, _, run, nodes = _hurt_mid_run(tmp_path, "term", "--failover")
    assert nodes[0].proc.returncode == 0  # finished what it held, then exited cleanly
    assert "drained and stopped" in nodes[0].log.read_text()
    data = _assert_logs_kept(run)
    assert data["status"] == "ok" and code in (0, 1)
    assert nodes[0].url in data["distributed"]["lost"]


@pytest.fixture(scope="module")
def vision(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vision")
    make_imagenet(root / "imagenet", count=12)
    resnet50_onnx(root / "resnet50_v1.onnx")
    return root


def test_resnet50_shaped_through_two_nodes_matches_in_process(vision: Path, tmp_path: Path) -> None:
    common = ["-b", "resnet50", "--model", str(vision / "resnet50_v1.onnx"), "--dataset",
              str(vision / "imagenet"), "--cache-dir", str(vision / "cache")]
    local_runs, remote_runs = tmp_path / "local", tmp_path / "remote"
    main(["run", *common, "--mode", "accuracy", "--no-progress", "--output-dir", str(local_runs)])
    nodes = start_nodes(tmp_path, 2, *common[1:])
    try:
        main(["run", *common, "--mode", "accuracy", "--no-progress", "--output-dir",
              str(remote_runs), "--backend", "remote", "--batch-size", "4", *endpoints(nodes)])
    finally:
        for node in nodes:
            node.stop()
    local = json.loads((only_run_dir(local_runs, "resnet50") / "mlperf_log_accuracy.json")
                       .read_text())
    remote_dir = only_run_dir(remote_runs, "resnet50")
    remote = json.loads((remote_dir / "mlperf_log_accuracy.json").read_text())
    assert {e["qsl_idx"]: e["data"] for e in remote} == {e["qsl_idx"]: e["data"] for e in local}
    served = json.loads((remote_dir / "run.json").read_text())["distributed"]["samples_served"]
    assert sum(served.values()) == 12 and all(v > 0 for v in served.values())
    # the network division's checker wants "Network SUT" in the logged sut_name: only the
    # remote run has it
    rules = load_rules()
    codes = {d: {p.code for p in performance_problems(
        parse_detail_log(only_run_dir(d, "resnet50") / "mlperf_log_detail.txt"),
        rules.find("resnet50"), rules, "network", "")} for d in (local_runs, remote_runs)}
    assert "network-sut-name" in codes[local_runs]
    assert "network-sut-name" not in codes[remote_runs]


def test_bert_nodes_warm_every_batch_width_on_loaded_samples(tmp_path: Path) -> None:
    squad = make_squad(tmp_path / "dev-v1.1.json", articles=2, seed=5)
    vocab = make_vocab(tmp_path / "vocab.txt", squad)
    make_bert_onnx(tmp_path / "bert.onnx", vocab_size(vocab))
    common = ["-b", "bert-99", "--model", str(tmp_path / "bert.onnx"), "--dataset", str(squad),
              "--vocab", str(vocab), "--cache-dir", str(tmp_path / "cache"),
              "--task-option", "sequence_step=16"]
    nodes = start_nodes(tmp_path, 1, *common[1:])
    try:
        runs = tmp_path / "runs"
        code = main(["run", *common, "--test", "--no-progress", "--output-dir", str(runs),
                     "--batch-size", "2", "--target-qps", "100", "--backend", "remote",
                     *endpoints(nodes)])
        stats = nodes[0].stats()
    finally:
        for node in nodes:
            node.stop()
    data = json.loads((only_run_dir(runs, "bert-99") / "run.json").read_text())
    assert data["status"] == "ok" and code in (0, 1)  # the verdict depends on this machine
    shapes = data["sut"]["warmup_shapes"]
    assert shapes > 1  # the synthetic questions need several widths in steps of 16
    served = sum(data["distributed"]["samples_served"].values())
    # one batch of 2 per width, on samples loaded for the warm-up and unloaded after it
    assert stats["samples"] == served + 2 * shapes
    assert stats["late_loads"] == 0 and stats["loaded"] == 0
