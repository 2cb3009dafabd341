"""System description: completeness against the checker's fields, truthiness, user overrides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlharness import rules
from mlharness.cli.main import main
from mlharness.submission import system

R = rules.load("v6.1")


def test_detected_description_has_every_required_field():
    desc, defaulted = system.describe("box", {"submitter": "Org"})
    assert set(R.system_required) <= set(desc)
    assert all(isinstance(v, str) for v in desc.values())
    for key in R.system_meaningful:
        assert desc[key], key
    assert desc["accelerators_per_node"] == "0"  # a string: 0 would fail the truthiness test
    assert "cooling" in defaulted
    assert system.problems(desc, R, "open", "Org") == []


def test_detection_reads_this_machine():
    found = system.detect()
    assert found["host_processor_model_name"]
    assert int(found["host_processor_core_count"]) >= 1
    assert found["host_memory_capacity"].endswith("GB")
    assert "L" in found["host_processor_caches"] or found["host_processor_caches"] == "unknown"
    assert "mlcommons-loadgen" in found["other_software_stack"]


def test_user_values_win_and_are_stringified():
    desc, defaulted = system.describe("box", {"cooling": "liquid", "accelerators_per_node": 0,
                                              "number_of_nodes": 2}, detected={})
    assert desc["cooling"] == "liquid" and "cooling" not in defaulted
    assert desc["accelerators_per_node"] == "0" and desc["number_of_nodes"] == "2"


def test_problems_name_each_missing_or_empty_field():
    desc, _ = system.describe("box", {"submitter": "Org"})
    del desc["hw_notes"]
    desc["cooling"] = ""
    desc["status"] = "soon"
    desc["system_type"] = "laptop"
    found = {p.code: p.message for p in system.problems(desc, R, "open", "Org")}
    assert found["system-field-missing"] == "field hw_notes is missing"
    assert found["system-field-empty"] == "field cooling is empty"
    assert "system-status" in found and "system-type" in found


def test_submitter_division_and_numbers_must_match():
    desc, _ = system.describe("box", {"submitter": "Org", "division": "open",
                                      "accelerators_per_node": "N/A"})
    codes = {p.code for p in system.problems(desc, R, "closed", "Other")}
    assert {"system-submitter", "system-division", "system-field-number"} <= codes


def test_network_division_needs_network_fields():
    desc, _ = system.describe("box", {"submitter": "Org", "division": "network"})
    codes = [p.code for p in system.problems(desc, R, "network", "Org")]
    assert codes.count("system-field-missing") == len(R.system_network)


def test_cli_detect_and_template(tmp_path: Path):
    toml = tmp_path / "my.toml"
    assert main(["system", "template", "--output", str(toml)]) == 0
    assert main(["system", "detect", "--name", "box", "--from", str(toml),
                 "--output", str(tmp_path / "systems")]) == 0
    desc = json.loads((tmp_path / "systems" / "box.json").read_text())
    assert desc["submitter"] == "MyOrg" and desc["system_name"] == "box"
    assert system.problems(desc, R, "open", "MyOrg") == []
    # never overwritten silently
    assert main(["system", "detect", "--name", "box", "--output", str(tmp_path / "systems")]) == 2


def test_cli_detect_exit_code_is_honest(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "systems"
    # nothing given: every field detected or defaulted; submitter/division come from submit
    assert main(["system", "detect", "--name", "box", "--output", str(out)]) == 0
    assert "set by `mlharness submit`" in capsys.readouterr().out
    assert json.loads((out / "box.json").read_text())["submitter"] == ""
    bad = tmp_path / "bad.toml"
    bad.write_text('[system]\nstatus = "soon"\nnumber_of_nodes = "two"\n')
    assert main(["system", "detect", "--name", "box", "--from", str(bad), "--output", str(out),
                 "--force"]) == 1  # written, but the checker would reject it
    screen = " ".join(capsys.readouterr().out.split())
    assert "status 'soon'" in screen and "number_of_nodes is 'two'" in screen
    assert f"mlharness system detect --name box --from {bad} --output {out} --force" in screen
    assert (out / "box.json").is_file()
