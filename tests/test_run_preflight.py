"""`mlharness run --valid` refuses, before running, what cannot count for the round."""

import pytest

from mlharness.cli.main import main


def test_valid_run_with_short_duration_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "-b", "resnet50", "--dataset", "/nonexistent", "--valid",
                 "--min-duration", "1000"])
    err = capsys.readouterr().err
    assert code == 2
    assert "cannot count for the round" in err and "600000" in err and "--no-preflight" in err


def test_valid_accuracy_run_on_a_subset_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "-b", "resnet50", "--dataset", "/nonexistent", "--valid",
                 "--mode", "accuracy", "--max-samples", "10"])
    assert code == 2
    assert "needs all 50000" in capsys.readouterr().err


def test_no_preflight_lets_the_run_reach_the_task(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "-b", "resnet50", "--dataset", "/nonexistent", "--valid",
                 "--min-duration", "1000", "--no-preflight", "--target-qps", "100"])
    err = capsys.readouterr().err
    assert code == 2 and "cannot count" not in err  # now the missing dataset is the complaint
    assert "/nonexistent" in err
