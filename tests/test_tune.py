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


def test_measured_latency_hint_does_not_run_out_of_queries(runs_dir: Path) -> None:
    """The SingleStream hint is measured (half the probed latency), so LoadGen generates enough
    queries for the min duration on a fast machine and a slow one."""
    from mlharness.loadgen.settings import TEST_MIN_DURATION_MS
    from mlharness.tune import latency_target_ms

    spec = RunSpec(benchmark="demo", scenario="SingleStream", output_dir=runs_dir)
    hint = latency_target_ms(spec, TEST_MIN_DURATION_MS)
    assert 0 < hint < 1000  # well below the probe's own 1000 ms hint
    probes = list((runs_dir / "_tune" / "demo").iterdir())
    assert probes and all('"purpose": "probe"' in (p / "run.json").read_text() for p in probes)
    record = execute(spec.replace(target_latency=hint))
    assert record.result is not None
    assert record.result.conditions.get("result_min_duration_met"), record.result.reasons
