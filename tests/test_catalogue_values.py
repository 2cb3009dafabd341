"""Catalogue: run settings with bad values (the typed RunSpec's validation, issue 10 item 6), seen
through the CLI: exit 2, one line naming the setting, no traceback, and nothing written (the run
is refused before its run directory exists)."""

from __future__ import annotations

from pathlib import Path

import pytest

from catalogue_support import assert_clean_error, run_cli, snapshot

RUN = ["run", "-b", "demo", "--no-progress", "--output-dir", "runs"]

FLAGS = [
    # (id, extra flags, fragment)
    ("target-qps-nan", ["--target-qps", "nan"], "finite"),
    ("target-qps-inf", ["--target-qps", "inf"], "finite"),
    ("target-qps-negative", ["--target-qps", "-3"], "target_qps"),
    ("server-target-qps-1e9", ["-s", "Server", "--target-qps", "1e9"], "above"),
    ("stall-timeout-nan", ["--stall-timeout", "nan"], "finite"),
    ("stall-timeout-zero", ["--stall-timeout", "0"], "must be > 0"),
    ("min-duration-negative", ["--min-duration", "-5"], ">= 0"),
    ("query-counts-crossed", ["--min-query-count", "10", "--max-query-count", "5"], "below"),
    ("set-unknown-key", ["--set", "unknownkey=1"], "unknownkey"),
    ("set-flag-key", ["--set", "min_duration=1000"], "own flag"),
    ("set-text-value", ["--set", "max_async_queries=many"], "only numbers"),
    ("round-unknown-on-demo", ["--round", "v9.9"], "unknown round"),
    ("batch-size-single-stream", ["-s", "SingleStream", "--batch-size", "4"],
     "does not apply to SingleStream"),
    ("task-option-typo", ["--task-option", "labl_offset=0"], "labl_offset"),
    ("backend-option-typo", ["--backend-option", "graph_optimisation=basic"],
     "graph_optimisation"),
]

TOMLS = [
    # (id, TOML body after benchmark = "demo", fragment)
    ("toml-short-no", 'short = "no"\n', "renamed"),
    ("toml-valid-no", 'valid = "no"\n', "valid"),
    ("toml-user-conf-extra-5", "user_conf_extra = 5\n", "renamed"),
    ("toml-set-5", "set = 5\n", "table"),
    ("toml-target-qps-text", 'target_qps = "5"\n', "target_qps"),
    ("toml-workers-bool", "workers = true\n", "workers"),
    ("toml-stall-nan", "stall_timeout = nan\n", "finite"),
    ("toml-run-not-a-table", "run = 5\n", "run"),
]


def _check(tmp_path: Path, capsys, argv: list[str], fragment: str) -> None:
    before = snapshot(tmp_path)
    result = run_cli(argv, capsys)
    assert_clean_error(result, 2, fragment)
    assert snapshot(tmp_path) == before
    assert not (tmp_path / "runs").exists()  # refused before a run directory was made


@pytest.mark.parametrize("case", FLAGS, ids=[c[0] for c in FLAGS])
def test_bad_flag_values_are_refused_by_name(case, tmp_path: Path, capsys, monkeypatch):
    _, extra, fragment = case
    monkeypatch.chdir(tmp_path)
    _check(tmp_path, capsys, [*RUN, *extra], fragment)


@pytest.mark.parametrize("case", TOMLS, ids=[c[0] for c in TOMLS])
def test_bad_toml_values_are_refused_by_name(case, tmp_path: Path, capsys, monkeypatch):
    _, body, fragment = case
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.toml").write_text(f'benchmark = "demo"\n{body}')
    _check(tmp_path, capsys, ["run", "--config", "run.toml", "--no-progress", "--output-dir",
                              "runs"], fragment)
