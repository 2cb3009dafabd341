"""End to end on the shipped demo, through the CLI, with the real LoadGen in a child process."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mlharness.cli.main import main

LOG_FILES = ("mlperf_log_summary.txt", "mlperf_log_detail.txt", "mlperf_log_accuracy.json",
             "user.conf", "run.json")


def only_run_dir(root: Path) -> Path:
    dirs = [p for p in (root / "demo").iterdir() if p.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


# every target measured first (short probes, margins): a fixed one fails a faster or slower
# machine. Server also gets an open-division 200 ms bound: its verdict on a busy 2-core machine
# otherwise depends on other processes' scheduling bursts, not on this code.
@pytest.mark.parametrize("scenario,flags", [
    ("SingleStream", []),  # no target in --test mode: measured first
    ("MultiStream", ["--target-latency", "auto"]),
    ("Server", ["--target-qps", "auto", "--server-latency", "200"]),
    ("Offline", ["--target-qps", "auto"]),
])
def test_each_scenario_runs_valid(runs_dir: Path, scenario: str, flags: list[str]) -> None:
    code = main(["run", "-b", "demo", "-s", scenario, "--test", "--no-progress",
                 "--output-dir", str(runs_dir), *flags])
    run = only_run_dir(runs_dir)  # the probes went to _tune/, not here, kept as run directories
    probes = list((runs_dir / "_tune" / "demo").iterdir())
    assert probes and all(json.loads((p / "run.json").read_text())["purpose"] == "probe"
                          for p in probes)
    for name in LOG_FILES:
        assert (run / name).is_file(), name
    data = json.loads((run / "run.json").read_text())
    assert data["status"] == "ok" and data["purpose"] is None  # a real run
    result = data["result"]
    assert result["scenario"] == scenario
    assert result["value"] > 0
    assert result["valid"] is True, result["reasons"]
    assert code == 0
    assert data["versions"]["mlcommons-loadgen"]
    assert "cpu" in data["system"]
    conf = (run / "user.conf").read_text()
    assert f"demo.{scenario}.min_duration = 2000" in conf
    if scenario in ("Server", "Offline"):
        assert f"demo.{scenario}.target_qps = " in conf  # what the probes measured
    detail = (run / "mlperf_log_detail.txt").read_text()
    assert detail.startswith(":::MLLOG")
    assert '"effective_min_duration_ms", "value": 2000' in detail
    # one untimed batch per worker before LoadGen started, recorded with its seconds
    assert data["sut"]["warmup_batches"] == 1 and data["sut"]["warmup_s"] >= 0
    assert data["sut"]["warmup_shapes"] == 1  # the demo's inputs have one shape


def test_accuracy_run_scores_top1(runs_dir: Path) -> None:
    code = main(["run", "-b", "demo", "--mode", "accuracy", "--no-progress",
                 "--output-dir", str(runs_dir)])
    run = only_run_dir(runs_dir)
    text = (run / "accuracy.txt").read_text().strip()
    assert text.startswith("accuracy=") and ", good=" in text and text.endswith("total=450")
    entries = json.loads((run / "mlperf_log_accuracy.json").read_text())
    assert len({e["qsl_idx"] for e in entries}) == 450
    data = json.loads((run / "run.json").read_text())
    assert data["accuracy"]["value"] >= 90.0
    assert data["accuracy"]["passed"] is True
    assert data["sut"]["warmup_batches"] == 0  # accuracy runs are not timed: no warm-up
    assert code == 0


# short but VALID on any machine: with --min-duration 0 validity does not depend on speed
SHORT_OFFLINE = ["-s", "Offline", "--min-duration", "0", "--min-query-count", "3000",
                 "--target-qps", "100"]


def test_json_output_is_run_json(runs_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "-b", "demo", *SHORT_OFFLINE, "--json", "--output-dir", str(runs_dir)])
    printed = json.loads(capsys.readouterr().out)
    assert printed["result"]["metric"] == "result_samples_per_second"
    assert printed.pop("run_dir") == str(only_run_dir(runs_dir))  # --json names the run dir
    assert printed == json.loads((only_run_dir(runs_dir) / "run.json").read_text())
    assert code == 0


def test_warmup_zero_runs_no_warm_up(runs_dir: Path) -> None:
    code = main(["run", "-b", "demo", *SHORT_OFFLINE, "--warmup", "0", "--no-progress",
                 "--output-dir", str(runs_dir)])
    data = json.loads((only_run_dir(runs_dir) / "run.json").read_text())
    assert code == 0
    assert data["spec"]["warmup"] == 0
    assert data["sut"]["warmup_batches"] == 0 and data["sut"]["warmup_s"] == 0
    assert data["sut"]["warmup_shapes"] == 0


def test_toml_config_and_flag_override(runs_dir: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "run.toml"
    cfg.write_text('benchmark = "demo"\nscenario = "Server"\ntarget_qps = 200\n'
                   f'server_latency = 200\noutput_dir = "{runs_dir}"\n')
    code = main(["run", "--config", str(cfg), "--target-qps", "250", "--no-progress"])
    run = only_run_dir(runs_dir)
    assert "demo.Server.target_qps = 250" in (run / "user.conf").read_text()
    assert "demo.Server.target_latency = 200" in (run / "user.conf").read_text()
    # the verdict of a fixed, unmeasured target depends on the machine: not asserted here
    assert json.loads((run / "run.json").read_text())["status"] == "ok" and code in (0, 1)


def test_invalid_offline_explains_target(runs_dir: Path) -> None:
    code = main(["run", "-b", "demo", "-s", "Offline", "--target-qps", "10", "--no-progress",
                 "--output-dir", str(runs_dir)])
    data = json.loads((only_run_dir(runs_dir) / "run.json").read_text())
    assert data["result"]["valid"] is False
    assert any("--target-qps" in r for r in data["result"]["reasons"])
    assert code == 1


def test_backend_failure_ends_run_fast(runs_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FAIL_ON_BATCH", "3")
    t0 = time.monotonic()
    code = main(["run", "-b", "demo", "-s", "Server", "--target-qps", "200", "--valid",
                 "--backend", "faulty_backends:FailingBackend", "--no-progress",
                 "--output-dir", str(runs_dir)])
    elapsed = time.monotonic() - t0
    assert code == 3
    assert elapsed < 30, elapsed  # a --valid Server run would otherwise take 600 s
    run = only_run_dir(runs_dir)
    data = json.loads((run / "run.json").read_text())
    assert data["status"] == "failed"
    assert "injected failure on batch 3" in data["error"]["message"]
    assert (run / "mlperf_log_detail.txt").is_file()  # partial logs kept
    assert "injected failure" in capsys.readouterr().out


def test_backend_failure_in_accuracy_mode(runs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIL_ON_BATCH", "2")
    code = main(["run", "-b", "demo", "--mode", "accuracy", "--batch-size", "16",
                 "--backend", "faulty_backends:FailingBackend", "--no-progress",
                 "--output-dir", str(runs_dir)])
    assert code == 3
    data = json.loads((only_run_dir(runs_dir) / "run.json").read_text())
    assert data["status"] == "failed" and data["accuracy"] is None


def test_stalled_backend_is_stopped(runs_dir: Path) -> None:
    t0 = time.monotonic()
    code = main(["run", "-b", "demo", "-s", "SingleStream", "--target-latency", "0.05",
                 "--backend", "faulty_backends:StallingBackend", "--stall-timeout", "3",
                 "--no-progress", "--output-dir", str(runs_dir)])
    assert code == 3
    assert time.monotonic() - t0 < 30
    data = json.loads((only_run_dir(runs_dir) / "run.json").read_text())
    assert "stalled" in data["error"]["message"]


def test_dead_worker_process_is_reported(runs_dir: Path) -> None:
    code = main(["run", "-b", "demo", "-s", "SingleStream", "--target-latency", "0.05",
                 "--backend", "faulty_backends:DyingBackend", "--no-progress",
                 "--output-dir", str(runs_dir)])
    assert code == 3
    data = json.loads((only_run_dir(runs_dir) / "run.json").read_text())
    assert "died" in data["error"]["message"] and "139" in data["error"]["message"]


def test_missing_model_is_a_user_error(runs_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "-b", "demo", "--model", "/nonexistent/model.onnx", "--no-progress",
                 "--output-dir", str(runs_dir)])
    err = capsys.readouterr().err
    assert code == 2
    assert "model file not found" in err and "hint:" in err


def test_wrong_input_names_is_a_user_error(runs_dir: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Flatten", ["pixels"], ["out"])], "g",
        [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 64])])
    model = tmp_path / "wrong.onnx"
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    onnx.save(proto, model)
    code = main(["run", "-b", "demo", "--model", str(model), "--no-progress",
                 "--output-dir", str(runs_dir)])
    err = capsys.readouterr().err
    assert code == 2
    assert "pixels" in err and "image" in err and "hint:" in err


def test_bad_flag_combination_is_a_user_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "-b", "demo", "-s", "Offline", "--target-latency", "3"])
    assert code == 2
    assert "--target-latency applies to SingleStream/MultiStream" in capsys.readouterr().err


def test_unknown_benchmark_lists_choices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "-b", "resnet5"]) == 2
    assert "resnet50" in capsys.readouterr().err
