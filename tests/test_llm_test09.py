"""TEST09 (gpt-oss-120b output length) equals compliance/TEST09/run_verification.py; its bounds
and TEST07's accuracy threshold in the rules equal the tests' audit.config files."""

from __future__ import annotations

import json
import re

import llm_fixtures as fx
import pytest
import referee

from mlharness.errors import DatasetError
from mlharness.llm import test09
from mlharness import rules

SCRIPT = "compliance/TEST09/run_verification.py"
AUDIT = "compliance/TEST09/gpt-oss-120b/audit.config"


@referee.official(AUDIT)
def test_bounds_are_the_audit_config_values():
    text = (referee.INFERENCE / AUDIT).read_text()
    values = dict(re.findall(r"^\*\.\*\.(test09_\w+_output_tokens) = ([\d.]+)", text, re.MULTILINE))
    bounds = rules.load("v6.1").benchmark("gpt-oss-120b").test09_output_tokens
    assert bounds == {"min": float(values["test09_min_output_tokens"]),
                      "max": float(values["test09_max_output_tokens"])}


@referee.official("compliance/TEST07/gpt-oss-120b/audit.config")
def test_test07_threshold_is_the_audit_config_value():
    text = (referee.INFERENCE / "compliance/TEST07/gpt-oss-120b/audit.config").read_text()
    value = re.search(r"^\*\.\*\.test07_accuracy_threshold = ([\d.]+)", text, re.MULTILINE)
    assert value and rules.load("v6.1").benchmark("gpt-oss-120b").test07_accuracy_threshold == \
        float(value.group(1))


def _log(tmp_path, lengths, bad=False):
    d = tmp_path / "run"
    d.mkdir()
    path = fx.token_log(d / "mlperf_log_accuracy.json",
                        {i: list(range(n)) for i, n in enumerate(lengths)}, dtype="int32",
                        repeat=(0,))
    if bad:
        entries = json.loads(path.read_text())
        entries[1]["data"] = "ABC"  # undecodable: counts 0 tokens
        entries[2]["data"] += "FF"  # a partial token is not counted
        path.write_text(json.dumps(entries))
    return d


@referee.official(SCRIPT, python=True)
@pytest.mark.parametrize(("lengths", "bounds", "bad"), [
    ([10, 12, 14, 9], (9.0, 12.5), False),
    ([10, 12, 14, 9], (11.5, 20.0), False),   # mean below the minimum
    ([10, 12, 14, 9], (1.0, 10.9), False),    # above the maximum
    ([10, 12, 14, 9], (5.0, 12.5), True),
])
def test_verdicts_equal_the_official_script(tmp_path, lengths, bounds, bad):
    run_dir = _log(tmp_path, lengths, bad)
    ours = test09.verify_log(run_dir / "mlperf_log_accuracy.json", *bounds)
    proc = referee.run(SCRIPT, "-c", str(run_dir), "-o", str(tmp_path / "out"),
                       "--min-output-tokens", str(bounds[0]), "--max-output-tokens",
                       str(bounds[1]), cwd=tmp_path)
    assert proc.returncode == (0 if ours.passed else 1), proc.stdout[-1500:]
    official = (tmp_path / "out" / "TEST09" / "verify_output_len.txt").read_text()
    assert ours.verify_output_len_txt() == official
    assert len(ours.lengths) == len(lengths) + 1  # every entry counts, the repeat too


@referee.official(SCRIPT, AUDIT, python=True)
def test_with_the_official_audit_config(tmp_path):
    run_dir = _log(tmp_path, [1300, 1200, 1250])
    b = rules.load("v6.1").benchmark("gpt-oss-120b").test09_output_tokens
    ours = test09.verify_log(run_dir / "mlperf_log_accuracy.json", b["min"], b["max"])
    proc = referee.run(SCRIPT, "-c", str(run_dir), "-o", str(tmp_path / "out"),
                       "--audit-config", str(referee.INFERENCE / AUDIT), cwd=tmp_path)
    assert proc.returncode == 0 and ours.passed
    assert ours.verify_output_len_txt() == \
        (tmp_path / "out" / "TEST09" / "verify_output_len.txt").read_text()


def test_unreadable_logs(tmp_path):
    (tmp_path / "empty.json").write_text("[]")
    with pytest.raises(DatasetError, match="holds no entries"):
        test09.verify_log(tmp_path / "empty.json", 1, 2)
    with pytest.raises(DatasetError, match="cannot read"):
        test09.verify_log(tmp_path / "missing.json", 1, 2)
