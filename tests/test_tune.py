"""Offline target finding on the demo: the measured target makes a VALID run."""

from pathlib import Path

from mlharness.runner import execute
from mlharness.spec import RunSpec
from mlharness.tune import offline_target_qps


def test_measured_offline_target_gives_a_valid_run(runs_dir: Path) -> None:
    spec = RunSpec(benchmark="demo", output_dir=runs_dir)
    target = offline_target_qps(spec)
    assert target > 1000  # the tiny MLP does far more than the probe's starting point
    assert list((runs_dir / "_tune" / "demo").iterdir())  # probes kept as run directories
    record = execute(RunSpec(benchmark="demo", target_qps=target, output_dir=runs_dir))
    assert record.result is not None and record.result.valid, record.result.reasons


def test_run_target_qps_auto(runs_dir: Path) -> None:
    from mlharness.cli.main import main

    assert main(["run", "-b", "demo", "--target-qps", "auto", "--no-progress",
                 "--output-dir", str(runs_dir)]) == 0
    conf = next((runs_dir / "demo").iterdir()) / "user.conf"
    assert "demo.Offline.target_qps = " in conf.read_text()


def test_auto_target_is_offline_only(capsys) -> None:
    from mlharness.cli.main import main

    assert main(["run", "-b", "demo", "-s", "Server", "--target-qps", "auto"]) == 2
    assert "Offline" in capsys.readouterr().err
