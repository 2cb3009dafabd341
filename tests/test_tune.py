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
