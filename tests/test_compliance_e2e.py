"""End to end: audits on the demo model through the CLI and the API, with the real LoadGen in the
runner's child process, and the official run_verification.py scripts run on the same runs.

The SUTs are test-only backends named by import path (``compliance_backends:...``): the demo
model behind a fixed delay per sample (steady timings on a shared machine), a SUT that caches
(pays the delay only for inputs it has not seen), and the same model with shifted answers in the
audit run (a SUT whose performance-mode output differs from its accuracy-mode output).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import referee
from compliance_support import official_passes, results_layout, run_official
from mlharness.cli.main import main
from mlharness.compliance import VerificationInputError, run_audit, verify
from mlharness.errors import ConfigError
from mlharness.spec import RunSpec

DELAY = "compliance_backends:DelayBackend"
CACHING = "compliance_backends:CachingBackend"


def spec(root: Path, backend: str = DELAY, mode: str = "performance",
         scenario: str = "Offline", **options: object) -> RunSpec:
    """Offline: the whole query (2200 samples) in one batch that takes 1 ms per sample
    (~1000 samples/s): the model's time hides inside the delay and a single hand-off is exposed
    to scheduling, so the 10% bands of TEST01/TEST04 hold on a busy machine. SingleStream: 2 ms
    per sample, a latency hint far below it so LoadGen never runs out of queries."""
    if scenario == "Offline":
        settings: dict = {"target_qps": 1000, "batch_size": 4096}
        delay = 1.0
    else:
        settings = {"target_latency": 0.01}
        delay = 2.0
    if mode == "accuracy":
        settings = {}
    return RunSpec(benchmark="demo", scenario=scenario, mode=mode, backend=backend,
                   output_dir=root, backend_option={"delay_ms": delay, **options}, **settings)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The audited SUT's own runs: Offline performance and accuracy."""
    from mlharness.runner import execute

    root = tmp_path_factory.mktemp("runs")
    perf = execute(spec(root))
    acc = execute(spec(root, mode="accuracy"))
    assert perf.status == "ok" and perf.result.valid, perf.result.reasons
    assert acc.status == "ok"
    return {"root": root, "perf": perf.run_dir, "acc": acc.run_dir}


@pytest.fixture(scope="module")
def audits(reference: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One TEST01 and one TEST04 audit run of the reference SUT, made here (no test relies on
    the audits another test ran)."""
    root = tmp_path_factory.mktemp("audits")
    return {test: run_audit(test, spec(reference["root"]), root / test).run_dir
            for test in ("TEST01", "TEST04")}


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def official_verification(test: str, perf: Path, acc: Path | None, audit: Path,
                          work: Path) -> dict[str, bool]:
    """Run the official run_verification.py; return TEST PASS per verify file it wrote."""
    results = results_layout(work / "results", perf, acc)
    out = work / "official"
    run_official(f"{test}/run_verification.py",
                 ["-r", str(results), "-c", str(audit), "-o", str(out)]
                 + (["--dtype", "float32"] if test == "TEST01" else []), work)
    return {f.name: official_passes(f.read_text()) for f in (out / test).glob("verify_*.txt")}


def ours(test_dir: Path) -> dict[str, bool]:
    return {f.name: official_passes(f.read_text()) for f in test_dir.glob("verify_*.txt")}


def assert_official_agrees(test: str, perf: Path, acc: Path | None, audit: Path,
                           out: Path, work: Path) -> None:
    """After our own checks: the official run_verification.py wrote the same verdicts and files
    (skips without the referee, fails under CI=true)."""
    referee.require(f"compliance/{test}/run_verification.py", python=True)
    theirs = official_verification(test, perf, acc, audit, work)
    assert ours(out / test) == theirs
    extra = {"accuracy/baseline_accuracy.txt", "accuracy/compliance_accuracy.txt"}  # Part III
    assert tree(out / test) - extra == tree(work / "official" / test)
    for name in ("performance/run_1/mlperf_log_detail.txt",
                 "performance/run_1/mlperf_log_summary.txt"):
        assert (out / test / name).read_bytes() == (work / "official" / test / name).read_bytes()


def test_required_audits_pass_through_cli(reference: dict[str, Path], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """No --audit: the audits the benchmark needs (the demo is audited like resnet50)."""
    out = tmp_path / "results" / "demo" / "Offline"
    code = main(["compliance", "--reference-perf", str(reference["perf"]),
                 "--reference-accuracy", str(reference["acc"]), "--output", str(out),
                 "--no-progress", "--json"])
    verdicts = json.loads(capsys.readouterr().out)
    assert [v["test"] for v in verdicts] == ["TEST01", "TEST04"]
    assert code == 0, verdicts
    for verdict in verdicts:
        test = verdict["test"]
        assert verdict["passed"] is True
        audit = Path(verdict["audit_run"])
        assert audit.parent == reference["root"] / "compliance" / test / "demo"
        assert (audit / "audit.config").is_file()  # kept with the run it configured
        expected = {"verify_performance.txt", "performance/run_1/mlperf_log_summary.txt",
                    "performance/run_1/mlperf_log_detail.txt"}
        if test == "TEST01":
            expected |= {"verify_accuracy.txt", "accuracy/mlperf_log_accuracy.json"}
            accuracy = (out / "TEST01" / "verify_accuracy.txt").read_text().splitlines()
            assert accuracy[-1] == "TEST PASS"
            assert verdict["accuracy"]["matched"] > 0
        assert tree(out / test) == expected
        assert "TEST PASS" in (out / test / "verify_performance.txt").read_text()
        assert_official_agrees(test, reference["perf"], reference["acc"], audit, out,
                               tmp_path / f"official-{test}")
        # the references may also be a scenario directory of a submission tree
        layout = results_layout(tmp_path / f"layout-{test}", reference["perf"], reference["acc"])
        again = verify(test, layout, layout, audit, tmp_path / f"from-layout-{test}")
        assert again.passed == verdict["passed"]
    assert not (reference["perf"] / "audit.config").exists()
    assert not Path("audit.config").exists()  # nothing left where the user stands

    # verify the same audit again, without running it
    again = tmp_path / "again"
    audit = Path(verdicts[1]["audit_run"])
    assert main(["compliance", "--audit", "TEST04", "--audit-run", str(audit), "--reference-perf",
                 str(reference["perf"]), "--output", str(again), "--no-progress"]) == 0
    assert "TEST04: TEST PASS" in capsys.readouterr().out
    assert (again / "TEST04" / "verify_performance.txt").read_text() == \
        (out / "TEST04" / "verify_performance.txt").read_text()


def test_caching_sut_fails_test04(tmp_path: Path) -> None:
    from mlharness.runner import execute

    root = tmp_path / "runs"
    base = spec(root, backend=CACHING, scenario="SingleStream")
    perf = execute(base)
    assert perf.status == "ok" and perf.result.valid, perf.result.reasons
    audit = run_audit("TEST04", base, root / "audits")
    assert audit.result.valid, audit.result.reasons  # a valid run: only its speed gives it away
    out = tmp_path / "out"
    verdict = verify("TEST04", perf.run_dir, None, audit.run_dir, out)
    assert not verdict.passed
    assert verdict.performance.test_score > 2 * verdict.performance.reference_score
    last = (out / "TEST04" / "verify_performance.txt").read_text().splitlines()[-1]
    assert last.startswith("TEST FAIL: ") and "caching" in last
    assert_official_agrees("TEST04", perf.run_dir, None, audit.run_dir, out, tmp_path / "work")


def test_changed_answers_fail_test01(reference: dict[str, Path], tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    audit_dir = reference["root"] / "compliance" / "TEST01" / "demo"
    before = set(audit_dir.iterdir()) if audit_dir.is_dir() else set()
    code = main(["compliance", "--audit", "TEST01", "--reference-perf", str(reference["perf"]),
                 "--reference-accuracy", str(reference["acc"]), "--output", str(out),
                 "--backend-option", "perturb=1", "--no-progress"])
    screen = capsys.readouterr().out
    assert code == 1
    assert "TEST01: TEST FAIL" in screen
    assert (out / "TEST01" / "verify_accuracy.txt").read_text().splitlines()[-1] == "TEST FAIL"
    assert "accuracy delta" in screen  # the not-bit-exact route fails as well
    acc_dir = out / "TEST01" / "accuracy"
    baseline = (acc_dir / "baseline_accuracy.txt").read_text()
    compliance = (acc_dir / "compliance_accuracy.txt").read_text()
    assert baseline.startswith("accuracy=") and compliance.startswith("accuracy=")
    assert float(compliance[9:].split("%")[0]) < 50 < float(baseline[9:].split("%")[0])
    [audit] = set(audit_dir.iterdir()) - before  # the audit this test ran
    run = json.loads((audit / "run.json").read_text())
    assert run["spec"]["backend_option"] == {"delay_ms": 1.0, "perturb": 1}
    assert_official_agrees("TEST01", reference["perf"], reference["acc"], audit, out,
                           tmp_path / "work")


def test_not_bit_exact_passes_through_accuracy_delta(reference: dict[str, Path],
                                                     tmp_path: Path) -> None:
    """One answer in 400 differs: not bit-exact, but within TEST01's 1% accuracy delta."""
    base = spec(reference["root"], perturb=1, perturb_every=400)
    audit = run_audit("TEST01", base, tmp_path / "audits")
    out = tmp_path / "out"
    verdict = verify("TEST01", reference["perf"], reference["acc"], audit.run_dir, out)
    assert verdict.accuracy is not None and not verdict.accuracy.passed
    assert verdict.accuracy.mismatched > 0
    assert verdict.accuracy_delta is not None and verdict.accuracy_delta.passed, \
        verdict.accuracy_delta
    assert verdict.accuracy_delta.allowed_percent == 1.0
    assert (out / "TEST01" / "verify_accuracy.txt").read_text().splitlines()[-1] == "TEST FAIL"
    assert (out / "TEST01" / "accuracy" / "baseline_accuracy.txt").is_file()
    assert verdict.passed == verdict.performance.passed
    exact = verify("TEST01", reference["perf"], reference["acc"], audit.run_dir,
                   tmp_path / "exact", score_fallback=False)
    assert exact.accuracy_delta is None and not exact.passed


def test_verify_refuses_wrong_inputs(reference: dict[str, Path], audits: dict[str, Path],
                                     tmp_path: Path) -> None:
    perf, acc, audit = reference["perf"], reference["acc"], audits["TEST04"]
    with pytest.raises(VerificationInputError, match="not run with the TEST04 audit.config"):
        verify("TEST04", perf, None, perf, tmp_path / "a")
    with pytest.raises(VerificationInputError, match="not run with the TEST01"):
        verify("TEST01", perf, acc, audit, tmp_path / "b")
    with pytest.raises(VerificationInputError, match="is a TEST04 audit run"):
        verify("TEST04", audit, None, audit, tmp_path / "b2")
    verify("TEST04", perf, None, audit, tmp_path / "c")
    with pytest.raises(VerificationInputError, match="already holds"):
        verify("TEST04", perf, None, audit, tmp_path / "c")
    assert verify("TEST04", perf, None, audit, tmp_path / "c", overwrite=True).passed
    # --force replaces only what a verification wrote: a file the user added stops it
    mine = tmp_path / "c" / "TEST04" / "performance" / "my-notes.txt"
    mine.write_text("mine")
    with pytest.raises(ConfigError, match="performance/my-notes.txt"):
        verify("TEST04", perf, None, audit, tmp_path / "c", overwrite=True)
    assert mine.read_text() == "mine"
    # only the files a verification writes, path by path, may go: the official layout carries
    # no marker of ours (it may be the submission tree itself)
    mine.unlink()
    assert verify("TEST04", perf, None, audit, tmp_path / "c", overwrite=True).passed
    assert not (tmp_path / "c" / "TEST04" / ".mlharness-owned").exists()
    (tmp_path / "c" / "TEST04" / "performance" / "run_1" / "mine.txt").write_text("mine")
    with pytest.raises(ConfigError, match="did not write"):
        verify("TEST04", perf, None, audit, tmp_path / "c", overwrite=True)
    other = tmp_path / "other"
    shutil.copytree(perf, other)
    run = json.loads((other / "run.json").read_text())
    (other / "run.json").write_text(json.dumps({**run, "benchmark": "resnet50"}))
    with pytest.raises(VerificationInputError, match="the audit ran demo"):
        verify("TEST04", other, None, audit, tmp_path / "e")
    with pytest.raises(VerificationInputError, match="needs the accuracy run"):
        verify("TEST01", perf, None, perf, tmp_path / "d")


def test_truncated_accuracy_log_is_refused(reference: dict[str, Path], audits: dict[str, Path],
                                           tmp_path: Path) -> None:
    acc = tmp_path / "acc"
    shutil.copytree(reference["acc"], acc)
    full = (acc / "mlperf_log_accuracy.json").read_bytes()
    (acc / "mlperf_log_accuracy.json").write_bytes(full[:4096] + b"\n\n...\n\n" + full[-4096:])
    with pytest.raises(VerificationInputError, match="not valid JSON") as err:
        verify("TEST01", reference["perf"], acc, audits["TEST01"], tmp_path / "out")
    assert "truncated" in err.value.hint
    with pytest.raises(VerificationInputError, match="not an accuracy run"):
        verify("TEST01", reference["perf"], reference["perf"], audits["TEST01"],
               tmp_path / "out2")


def test_cli_user_errors(reference: dict[str, Path], tmp_path: Path,
                         capsys: pytest.CaptureFixture[str]) -> None:
    base = ["compliance", "--reference-perf", str(reference["perf"]), "--output", str(tmp_path)]
    assert main(base + ["--audit", "TEST01"]) == 2
    assert "--reference-accuracy" in capsys.readouterr().err
    assert main(base + ["--test", "TEST01"]) == 2  # the old spelling: the same, with a note
    err = " ".join(capsys.readouterr().err.split())
    assert "--reference-accuracy" in err and "old spelling of `--audit TEST0X`" in err
    assert main(base) == 2  # the demo needs TEST01 too, hence the accuracy run
    assert "--reference-accuracy" in capsys.readouterr().err
    assert main(base + ["--audit-run", str(reference["perf"])]) == 2
    assert "--audit TEST01" in capsys.readouterr().err
    assert main(base + ["--audit", "TEST04", "--audit-run", str(reference["perf"])]) == 2
    assert "not run with the TEST04 audit.config" in " ".join(capsys.readouterr().err.split())
    assert main(["compliance", "--audit", "TEST04", "--reference-perf", str(tmp_path / "nope"),
                 "--output", str(tmp_path)]) == 2
    capsys.readouterr()
    failed = tmp_path / "failed"  # a reference whose run failed (a stall): nothing to audit
    shutil.copytree(reference["perf"], failed)
    run = json.loads((failed / "run.json").read_text())
    (failed / "run.json").write_text(json.dumps({**run, "status": "failed", "error": {
        "message": "no progress while loading the model for 60 s", "phase": "loading the model"}}))
    assert main(["compliance", "--audit", "TEST04", "--reference-perf", str(failed),
                 "--output", str(tmp_path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"the reference run {failed} failed: no progress while loading the model" in err
    assert "audit a run that completed" in err
    assert main(base + ["--audit", "TEST06"]) == 2  # an LLM test: not an audit of the demo
    assert "TEST06 audits the LLM benchmarks, not 'demo'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(base + ["--audit", "TEST08"])  # not a test mlharness runs
    with pytest.raises(SystemExit):
        main(base + ["--audit"])  # --audit names at least one test


def test_run_compliance_one_call(reference: dict[str, Path], tmp_path: Path) -> None:
    from mlharness.compliance import run_compliance, spec_of_run

    base = spec_of_run(reference["perf"])
    assert (base.backend, base.mode, base.audit_config) == (DELAY, "performance", None)
    verdict = run_compliance("TEST04", reference["perf"], None, tmp_path / "out",
                             runs_dir=tmp_path / "runs")
    assert verdict.passed, verdict.performance.render()
    assert verdict.audit_run.parent == tmp_path / "runs" / "compliance" / "TEST04" / "demo"
    assert verdict.to_dict()["test"] == "TEST04"


def test_dtype_needs_the_task_or_a_flag(reference: dict[str, Path], tmp_path: Path) -> None:
    from mlharness.compliance.verify import response_dtype_of

    run = tmp_path / "run"
    shutil.copytree(reference["acc"], run)
    data = json.loads((run / "run.json").read_text())
    assert response_dtype_of(run) == "float32"  # rebuilt from the spec: the demo task
    assert data["task"]["response_dtype"] == "float32"  # recorded by the runner
    data["task"].pop("response_dtype")  # as in runs from before it was recorded
    data["spec"]["dataset"] = str(tmp_path / "gone")
    (run / "run.json").write_text(json.dumps(data))
    with pytest.raises(VerificationInputError, match="cannot tell the response type") as err:
        response_dtype_of(run)
    assert "--dtype" in err.value.hint
    data["task"]["response_dtype"] = "int64"  # recorded by the runner: no task needed
    (run / "run.json").write_text(json.dumps(data))
    assert response_dtype_of(run) == "int64"
