"""Our TEST01/TEST04 outputs read by the official submission checker (v6.1, closed division).

A ResNet50-shaped model on synthetic images behind a 20 ms-per-sample delay (steady timings),
Offline, --test length: reference runs, both audits through ``mlharness compliance``, the tree
through ``mlharness submit``, then ``submission_checker.main`` from the official checkout. The
checker must find our compliance files complete and judge each test as we did; its other
complaints (run length, samples per query, missing scenarios, dataset size) are those of a --test
run on synthetic data.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import referee
from mlharness.cli.main import main
from synthetic_vision import make_imagenet, resnet50_onnx

CHECKER = "tools/submission/submission_checker"
pytestmark = [referee.official(CHECKER, python=True), pytest.mark.slow]

BACKEND = ["--backend", "compliance_backends:DelayBackend", "--backend-option", "delay_ms=20",
           "--batch-size", "8"]


def official_checker(root: Path) -> str:
    """The checker run by hand, in the referee's Python (not through our own wrapper)."""
    proc = referee.python("-m", "submission_checker.main", "--input", str(root), "--version",
                          "v6.1", cwd=referee.INFERENCE / "tools" / "submission", check=False)
    return proc.stdout + proc.stderr


def test_official_checker_accepts_our_compliance_outputs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_imagenet(tmp_path / "imagenet", count=32)
    model = resnet50_onnx(tmp_path / "resnet.onnx")
    runs = tmp_path / "runs"
    common = ["-b", "resnet50", "-m", str(model), "-d", str(tmp_path / "imagenet"), "-s",
              "Offline", "--output-dir", str(runs), "--no-progress", *BACKEND]
    assert main(["run", *common, "--target-qps", "auto"]) == 0  # measured: VALID on any machine
    assert main(["run", *common, "--mode", "accuracy"]) in (0, 1)  # random weights: low top-1
    perf = next((runs / "resnet50").glob("Offline-performance-*"))
    acc = next((runs / "resnet50").glob("Offline-accuracy-*"))
    capsys.readouterr()
    main(["compliance", "--reference-perf", str(perf), "--reference-accuracy", str(acc),
          "--output", str(tmp_path / "verified"), "--no-progress", "--json"])
    verdicts = {v["test"]: v for v in json.loads(capsys.readouterr().out)}
    assert set(verdicts) == {"TEST01", "TEST04"}
    assert verdicts["TEST01"]["accuracy"]["passed"] is True

    sub = tmp_path / "submission"
    main(["submit", "--submitter", "MyOrg", "--division", "closed", "--system", "sys1",
          "--runs", str(runs), "--output", str(sub)])
    scen = sub / "closed" / "MyOrg" / "results" / "sys1" / "resnet" / "Offline"
    for test in ("TEST01", "TEST04"):
        assert (scen / test / "verify_performance.txt").is_file()
    text = official_checker(sub)
    errors = [line for line in text.splitlines() if " ERROR] " in line]
    # nothing wrong with the compliance files themselves
    assert not [e for e in errors if "compliance_check.py" in e and "performance check" not in e]
    assert re.search(r"Compliance test accuracy check \(deterministic mode\) in \S+TEST01 passed",
                     text), text[-3000:]
    for test, verdict in verdicts.items():
        failed = any(f"Compliance test performance check in {scen / test} failed" in e
                     for e in errors)
        assert failed == (not verdict["performance"]["passed"]), (test, verdict["performance"])
        # the audits are --test runs: the checker judges their length like any run's
        assert any(f"{scen / test} Test duration less than 600s" in e for e in errors)
