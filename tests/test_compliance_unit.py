"""Compliance pieces without LoadGen runs: audit.config values and the accuracy comparison."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from compliance_support import OFFICIAL, official
from mlharness.compliance import (
    VerificationInputError, audit_config, compare_accuracy_logs, official_dtype, required_tests,
)
from mlharness.compliance.audit_config import TEST01_SAMPLING_TARGET, parse_audit_config
from mlharness.errors import ConfigError


def test_test01_audit_config_values() -> None:
    text = audit_config("TEST01", "resnet50").render()
    assert parse_audit_config(text) == {
        "*.*.mode": "2",
        "*.*.accuracy_log_rng_seed": "720381539243781796",
        "*.*.accuracy_log_sampling_target": "4096",
    }
    assert parse_audit_config(audit_config("TEST01", "retinanet").render())[
        "*.*.accuracy_log_sampling_target"] == "256"
    assert audit_config("TEST01", "demo").entries == audit_config("TEST01", "resnet50").entries


def test_test04_audit_config_values() -> None:
    keys = parse_audit_config(audit_config("TEST04", "bert").render())
    for scenario in ("SingleStream", "MultiStream", "Server", "Offline"):
        assert keys[f"*.{scenario}.mode"] == "2"
        assert keys[f"*.{scenario}.performance_issue_unique"] == "0"
        assert keys[f"*.{scenario}.performance_issue_same"] == "1"
        assert keys[f"*.{scenario}.performance_issue_same_index"] == "3"
    assert len(keys) == 16
    assert all(k.startswith("*.") for k in keys)


def test_unknown_test_or_model_is_a_user_error() -> None:
    with pytest.raises(ConfigError):
        audit_config("TEST06", "resnet50")
    # rounds/<round>/compliance/nvidia/TEST05/audit.config, the same file in v2.1 ... v4.1
    assert "*.*.test05 = 1" in audit_config("TEST05", "resnet50").render().splitlines()
    with pytest.raises(ConfigError, match="no official TEST01"):
        audit_config("TEST01", "not-a-model")


@official
@pytest.mark.parametrize("model", sorted(TEST01_SAMPLING_TARGET))
def test_test01_values_equal_the_official_files(model: str) -> None:
    official_keys = parse_audit_config(
        (OFFICIAL / "compliance" / "TEST01" / model / "audit.config").read_text())
    assert parse_audit_config(audit_config("TEST01", model).render()) == official_keys


@official
def test_official_test01_models_are_all_known() -> None:
    dirs = {p.parent.name for p in (OFFICIAL / "compliance" / "TEST01").glob("*/audit.config")}
    assert dirs == set(TEST01_SAMPLING_TARGET)


@official
def test_test04_values_equal_the_official_wildcard_lines() -> None:
    official_keys = parse_audit_config(
        (OFFICIAL / "compliance" / "TEST04" / "audit.config").read_text())
    # LoadGen reads audit.config as model "*": only the wildcard lines can take effect
    wildcard = {k: v for k, v in official_keys.items() if k.startswith("*.")}
    assert parse_audit_config(audit_config("TEST04", "resnet50").render()) == wildcard


def test_required_tests_per_round() -> None:
    assert required_tests("resnet50") == ["TEST01", "TEST04"]
    assert required_tests("bert-99") == ["TEST01"]
    assert required_tests("bert-99.9", "v6.0") == ["TEST01"]
    assert required_tests("retinanet", "v6.1") == []
    assert required_tests("retinanet", "v6.0") == ["TEST01"]
    assert required_tests("resnet50", division="open") == []
    assert required_tests("resnet50", "v4.0") == ["TEST01", "TEST04", "TEST05"]
    assert required_tests("bert-99", "v3.0") == ["TEST01", "TEST05"]
    with pytest.raises(ConfigError):
        required_tests("resnet50", "v4.2")


def test_official_dtype_names() -> None:
    assert official_dtype("float32") == "float32"
    assert official_dtype("int64") == "int64"
    assert official_dtype("int32") == "int32"
    assert official_dtype("uint8") == "byte"
    assert official_dtype("float16") == "byte"


def _log(path: Path, entries: list[tuple[int, bytes]]) -> Path:
    path.write_text(json.dumps([{"seq_id": n, "qsl_idx": i, "data": d.hex().upper()}
                                for n, (i, d) in enumerate(entries)]))
    return path


def f32(*values: float) -> bytes:
    return np.array(values, dtype=np.float32).tobytes()


def test_accuracy_equal_first_elements_pass(tmp_path: Path) -> None:
    ref = _log(tmp_path / "ref.json", [(i, f32(i, 0.5)) for i in range(10)])
    # only the first element counts (as in the official verify_accuracy.py)
    test = _log(tmp_path / "test.json", [(3, f32(3, 9.0)), (7, f32(7, 0.5)), (3, f32(3, 1.0))])
    check = compare_accuracy_logs(ref, test, "float32")
    assert check.passed and check.matched == 3 and check.mismatched == 0
    assert check.render().splitlines()[-1] == "TEST PASS"


def test_accuracy_difference_fails(tmp_path: Path) -> None:
    ref = _log(tmp_path / "ref.json", [(i, f32(i)) for i in range(10)])
    test = _log(tmp_path / "test.json", [(1, f32(1)), (2, f32(5)), (4, f32(4))])
    check = compare_accuracy_logs(ref, test, "float32")
    assert not check.passed
    assert (check.matched, check.mismatched, check.mismatched_examples) == (3, 1, [2])
    assert check.render().splitlines()[-1] == "TEST FAIL"


def test_accuracy_nothing_matched_fails(tmp_path: Path) -> None:
    ref = _log(tmp_path / "ref.json", [(0, f32(0))])
    test = _log(tmp_path / "test.json", [(5, f32(5)), (5, f32(5))])
    check = compare_accuracy_logs(ref, test, "float32")
    # the second entry for 5 matches the first: a known response comes from the test log too
    assert (check.unknown, check.matched) == (1, 1)
    assert check.passed
    empty = _log(tmp_path / "empty.json", [])
    assert not compare_accuracy_logs(ref, empty, "float32").passed


def test_accuracy_empty_responses(tmp_path: Path) -> None:
    ref = _log(tmp_path / "ref.json", [(0, b""), (1, f32(1))])
    same = _log(tmp_path / "same.json", [(0, b"")])
    assert compare_accuracy_logs(ref, same, "float32").passed
    differs = _log(tmp_path / "differs.json", [(1, b"")])
    assert not compare_accuracy_logs(ref, differs, "float32").passed


def test_accuracy_dtype_decides_what_the_first_element_is(tmp_path: Path) -> None:
    ref = _log(tmp_path / "ref.json", [(0, f32(1.0))])
    # 1.0 and 3.0 differ only in their high bytes; little-endian byte 0 is 0 for both
    test = _log(tmp_path / "test.json", [(0, f32(3.0))])
    assert not compare_accuracy_logs(ref, test, "float32").passed
    assert compare_accuracy_logs(ref, test, "byte").passed  # the first byte only


def test_accuracy_unreadable_dtype_fails(tmp_path: Path) -> None:
    ref = _log(tmp_path / "ref.json", [(0, b"\x01\x02\x03")])
    test = _log(tmp_path / "test.json", [(0, b"\x01\x02\x03")])
    check = compare_accuracy_logs(ref, test, "float32")
    assert not check.passed and "cannot be read as float32" in check.reason


def test_truncated_reference_log_is_a_user_error(tmp_path: Path) -> None:
    full = _log(tmp_path / "ref.json", [(i, f32(i)) for i in range(2000)]).read_bytes()
    trunc = tmp_path / "trunc.json"
    trunc.write_bytes(full[:4096] + b"\n\n...\n\n" + full[-4096:])
    test = _log(tmp_path / "test.json", [(0, f32(0))])
    with pytest.raises(VerificationInputError, match="not valid JSON") as err:
        compare_accuracy_logs(trunc, test, "float32")
    assert "truncated" in err.value.hint
    with pytest.raises(VerificationInputError, match="not found"):
        compare_accuracy_logs(tmp_path / "missing.json", test, "float32")


#: (reference entries, test entries, dtype) pairs covering each rule of the comparison
ACCURACY_CASES = {
    "equal": ([(i, f32(i, 0.5)) for i in range(10)], [(3, f32(3, 9.0)), (7, f32(7, 0.5))],
              "float32"),
    "one differs": ([(i, f32(i)) for i in range(10)], [(1, f32(1)), (2, f32(5))], "float32"),
    "no match": ([(0, f32(0))], [(5, f32(5))], "float32"),
    "repeat in test": ([(0, f32(0))], [(5, f32(5)), (5, f32(5))], "float32"),
    "repeat in test differs": ([(0, f32(0))], [(5, f32(5)), (5, f32(6))], "float32"),
    "empty equal": ([(0, b""), (1, f32(1))], [(0, b"")], "float32"),
    "empty vs data": ([(0, b""), (1, f32(1))], [(1, b"")], "float32"),
    "byte view": ([(0, f32(1.0))], [(0, f32(3.0))], "byte"),
    "float view": ([(0, f32(1.0))], [(0, f32(3.0))], "float32"),
    "int64": ([(0, np.int64(7).tobytes())], [(0, np.int64(7).tobytes())], "int64"),
    "int32 differs": ([(0, np.int32(7).tobytes())], [(0, np.int32(8).tobytes())], "int32"),
    "duplicate reference": ([(0, f32(0)), (0, f32(1))], [(0, f32(0))], "float32"),
    "unreadable": ([(0, b"\x01\x02\x03")], [(0, b"\x01\x02\x03")], "float32"),
}


@official
@pytest.mark.parametrize("case", sorted(ACCURACY_CASES))
def test_accuracy_agrees_with_official_verify_accuracy(tmp_path: Path, case: str) -> None:
    from compliance_support import official_passes, run_official

    ref_entries, test_entries, dtype = ACCURACY_CASES[case]
    ref = _log(tmp_path / "ref.json", ref_entries)
    test = _log(tmp_path / "test.json", test_entries)
    ours = compare_accuracy_logs(ref, test, dtype)
    theirs = run_official("TEST01/verify_accuracy.py",
                          ["-r", str(ref), "-t", str(test), "--dtype", dtype], tmp_path)
    assert ours.passed == official_passes(theirs), theirs


@official
@pytest.mark.parametrize("version", ["v6.1", "v6.0", "v5.1"])  # the rounds with rules/*.toml
def test_required_tests_equal_the_checker_lists(version: str) -> None:
    import sys

    sys.path.insert(0, str(OFFICIAL / "tools" / "submission"))
    try:
        from submission_checker.constants import MODEL_CONFIG
    finally:
        sys.path.remove(str(OFFICIAL / "tools" / "submission"))
    config = MODEL_CONFIG[version]
    for ours, checker in (("resnet50", "resnet"), ("retinanet", "retinanet"),
                          ("bert-99", "bert-99"), ("bert-99.9", "bert-99.9")):
        expected = [t for t in ("TEST01", "TEST04") if checker in config[f"models_{t}"]]
        assert required_tests(ours, version) == expected, (version, ours)


def test_accuracy_delta_rule() -> None:
    from mlharness.compliance.accuracy_delta import AccuracyDelta
    from mlharness.rules.model import accuracy_delta_percent

    assert accuracy_delta_percent("bert-99") == 1.0
    assert accuracy_delta_percent("bert-99.9") == 0.1
    assert accuracy_delta_percent("resnet50") == 1.0
    # |1 - baseline / compliance| * 100, as the submission checker computes it
    assert AccuracyDelta("acc", 76.0, 76.5, 1.0, 100).passed
    assert not AccuracyDelta("acc", 76.0, 75.0, 1.0, 100).passed  # 1.33%
    assert not AccuracyDelta("F1", 90.0, 90.2, 0.1, 100).passed  # 0.22%
    assert not AccuracyDelta("acc", 0.0, 0.0, 1.0, 100).passed  # a zero never passes
