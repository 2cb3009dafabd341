"""3D-UNet TEST01 end to end: an accuracy and a performance run of a few synthetic cases, the
audit through ``mlharness compliance``, and the official ``compliance/TEST01/run_verification.py``
on the same runs (``--dtype byte``: the responses are uint8 labels).

The SUT is the 3D-UNet model behind a fixed time per window (``compliance_backends:DelayBackend``,
a deadline the model's own time hides in), so the 10% performance band holds on a busy machine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import referee
from compliance_support import official_passes, results_layout, run_official
from mlharness.cli.main import main
from mlharness.runner import execute
from mlharness.spec import RunSpec
from synthetic_kits19 import make_kits19, unet3d_onnx

pytestmark = pytest.mark.slow
DELAY = "compliance_backends:DelayBackend"


def spec(root: Path, mode: str = "performance") -> RunSpec:
    timing = {"target_qps": 0.2, "min_duration": 4000} if mode == "performance" else {}
    return RunSpec(benchmark="3d-unet-99", scenario="Offline", mode=mode, backend=DELAY,
                   model=root / "unet3d.onnx", dataset=root / "data", cache_dir=root / "cache",
                   max_samples=2, output_dir=root / "runs", stall_timeout=600.0,
                   backend_option={"delay_ms": 1500.0}, **timing)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kits19audit")
    make_kits19(root / "data", duplicate=False)
    unet3d_onnx(root / "unet3d.onnx")
    perf = execute(spec(root))
    acc = execute(spec(root, "accuracy"))
    assert perf.status == "ok" and perf.result.valid, perf.result.reasons
    assert acc.status == "ok"
    return {"root": root, "perf": perf.run_dir, "acc": acc.run_dir}


def test_test01_passes_and_the_official_script_agrees(runs: dict[str, Path],
                                                      tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = main(["compliance", "--audit", "TEST01", "--reference-perf", str(runs["perf"]),
                 "--reference-accuracy", str(runs["acc"]), "--output", str(out),
                 "--no-progress"])
    ours = {f.name: official_passes(f.read_text()) for f in (out / "TEST01").glob("verify_*.txt")}
    # the accuracy part is deterministic; the performance part compares two timed runs within
    # 10 %, which a loaded machine may break: it must agree with the official script, below
    assert ours["verify_accuracy.txt"] and set(ours) == {"verify_accuracy.txt",
                                                          "verify_performance.txt"}
    assert code == (0 if all(ours.values()) else 1)
    [audit] = [p for p in (runs["root"] / "runs" / "compliance" / "TEST01" / "3d-unet-99")
               .iterdir() if p.is_dir()]
    config = (audit / "audit.config").read_text()
    assert "accuracy_log_sampling_target = 64" in config  # compliance/TEST01/3d-unet/audit.config
    assert json.loads((audit / "mlperf_log_accuracy.json").read_text())  # it logged responses

    referee.require("compliance/TEST01/run_verification.py", python=True)
    work = tmp_path / "official"
    results = results_layout(work / "results", runs["perf"], runs["acc"])
    run_official("TEST01/run_verification.py", ["-r", str(results), "-c", str(audit), "-o",
                                                 str(work / "out"), "--dtype", "byte"], work)
    theirs = {f.name: official_passes(f.read_text())
              for f in (work / "out" / "TEST01").glob("verify_*.txt")}
    assert theirs == ours
