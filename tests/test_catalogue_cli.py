"""Catalogue: the command line itself (issue 36 items 2, 3, 5, 6, 8): flags given in full or
refused, `check` of nothing, `tune`'s help and its words when nothing was VALID, rich markup in
paths and messages, where `report -o` may write, and what `runs`/`compare` say about names.

Each case runs the CLI in-process in a scratch workspace and asserts the exit code, the message,
no traceback, and that nothing but what the command may write changed.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from catalogue_support import assert_clean_error, run_cli, snapshot


@pytest.fixture
def ws(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("untouched")
    return tmp_path


# ---- item 3: no abbreviated flags ------------------------------------------------------------
ABBREVIATED = [
    # (id, argv, the abbreviation refused)
    ("tune-mode-is-not-model", ["tune", "-b", "demo", "-s", "Offline", "--mode", "accuracy"],
     "--mode"),
    ("run-mod", ["run", "-b", "demo", "--mod", "accuracy"], "--mod"),
    ("run-out", ["run", "-b", "demo", "--out", "elsewhere"], "--out"),
    ("runs-bench", ["runs", "--bench", "demo"], "--bench"),
    ("compare-form", ["compare", "--form", "csv"], "--form"),
    ("report-out", ["report", "runs", "--out", "r.html"], "--out"),
    ("top-level-vers", ["--vers"], "--vers"),
]


@pytest.mark.parametrize("case", ABBREVIATED, ids=[c[0] for c in ABBREVIATED])
def test_an_abbreviated_flag_is_refused_not_guessed(case, ws: Path, capsys):
    _, argv, flag = case
    before = snapshot(ws)
    result = run_cli(argv, capsys)
    assert_clean_error(result, 2, flag)
    assert "unrecognized arguments" in result.err or "invalid choice" in result.err, result.err
    assert snapshot(ws) == before


def test_every_parser_refuses_abbreviations():
    from mlharness.cli.main import build_parser

    seen = []

    def walk(parser: argparse.ArgumentParser) -> None:
        seen.append(parser)
        assert parser.allow_abbrev is False, parser.prog
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    walk(child)

    walk(build_parser())
    assert len(seen) > 12  # every command and `system`'s actions


def test_tune_help_offers_only_what_tune_reads(capsys):
    result = run_cli(["tune", "--help"], capsys)
    assert result.code == 0
    text = " ".join(result.out.split("examples:")[0].split())  # the flags, not the examples
    assert "(default all four)" in text and "(default Offline)" not in text
    for flag in ("--target-qps", "--target-latency", "--valid", "--test", "--min-duration",
                 "--min-query-count", "--max-query-count", "--mode"):
        assert not re.search(rf"{flag}(?![\w-])", text), flag
    assert "write the targets and engine settings measured" in text  # what --sut means here


def test_tune_refuses_a_run_only_flag(ws: Path, capsys):
    result = run_cli(["tune", "-b", "demo", "--target-qps", "5"], capsys)
    assert_clean_error(result, 2, "unrecognized arguments: --target-qps")
    assert not (ws / "runs").exists() and not (ws / "suts").exists()


def test_tune_without_a_valid_server_point_says_so():
    from mlharness.cli.tune import outcome_lines
    from mlharness.tune.scenario import Tuned

    server = Tuned("demo", "Server", None, None, "bracketing search, 7 probes")
    offline = Tuned("demo", "Offline", 900.0, 600.0, "5 probes")
    lines = outcome_lines([server], "box", Path("suts/box.toml"), "demo")
    text = "\n".join(lines)
    assert "use it" not in text and "--valid" not in text
    assert "no VALID point found for Server; box has no target for it" in text
    assert "lower the load" in text and "(no targets)" in text
    both = "\n".join(outcome_lines([server, offline], "box", Path("suts/box.toml"), "demo"))
    assert "use it: mlharness run -b demo -s Offline --sut box --valid" in both
    assert "no VALID point found for Server" in both
    alone = "\n".join(outcome_lines([server], None, None, "demo"))
    assert alone.startswith("no VALID point found for Server:")


# ---- item 2: check of nothing ----------------------------------------------------------------
@pytest.mark.parametrize("layout", [("open",), ("open", "closed"),
                                    ("open/Org/results/tiny", "open/Org/src")],
                         ids=["empty-open", "empty-open-and-closed", "system-without-benchmark"])
def test_check_of_an_empty_division_is_a_problem(layout, ws: Path, capsys):
    for d in layout:
        (ws / "tree" / d).mkdir(parents=True)
    before = snapshot(ws)
    result = run_cli(["check", "tree"], capsys)
    assert result.code == 1, result.out
    assert "nothing to check" in result.out and "no problems" not in result.out
    assert "Traceback" not in result.out + result.err
    assert snapshot(ws) == before


# ---- item 5: markup in paths and messages is shown literally ---------------------------------
MARKUP = "a[/]b[red]c"
FAST = ["-s", "Offline", "--min-duration", "0", "--min-query-count", "100", "--target-qps", "100",
        "--no-progress"]


def _said(result) -> str:  # type: ignore[no-untyped-def]
    return "".join((result.out + result.err).split())  # rich wraps long lines anywhere


def test_markup_in_a_missing_model_path_is_shown_literally(ws: Path, capsys):
    before = snapshot(ws)
    result = run_cli(["run", "-b", "demo", *FAST, "--model", f"{MARKUP}.onnx",
                      "--output-dir", "runs"], capsys)
    assert_clean_error(result, 2, f"model file not found: {MARKUP}.onnx")
    assert snapshot(ws, skip=("runs",)) == before  # the run's directory keeps its record


def test_markup_in_the_output_dir_is_shown_literally(ws: Path, capsys):
    result = run_cli(["run", "-b", "demo", *FAST, "--output-dir", MARKUP], capsys)
    assert result.code == 0, result.err
    assert "Traceback" not in result.out + result.err
    assert f"{MARKUP}/demo/Offline-performance-" in _said(result)
    listed = run_cli(["runs", "--runs-dir", MARKUP], capsys)
    assert listed.code == 0 and f"1run(s)in{MARKUP}" in _said(listed)
    checked = run_cli(["check", MARKUP], capsys)  # not a submission: its name in the problem
    assert checked.code == 1 and f"•{MARKUP}:noclosed/open/networkdirectoryin{MARKUP}" in \
        _said(checked)


def test_unescaped_markup_from_any_caller_prints_literally_instead_of_crashing(capsys):
    # the safety net under every print: a caller that did not escape a path (as `run`'s line
    # "measuring the Offline target with short probe runs in DIR/_tune …") prints it literally
    from mlharness.cli.render import console, console_err

    console.print(f"measuring the target in {MARKUP}/_tune …")
    console_err.print(f"[red]run failed:[/] {MARKUP}")
    captured = capsys.readouterr()
    assert f"measuring the target in {MARKUP}/_tune" in captured.out
    assert MARKUP in captured.err


def test_markup_in_a_backends_error_is_shown_literally(ws: Path, capsys):
    from catalogue_markup import MARKUP_ERROR

    result = run_cli(["run", "-b", "demo", *FAST, "--backend",
                      "catalogue_markup:MarkupErrorBackend", "--output-dir", "runs"], capsys)
    assert result.code == 3 and "Traceback" not in result.out + result.err, result.err
    assert "".join(MARKUP_ERROR.split()) in _said(result)


def test_markup_in_a_report_path_is_shown_literally(ws: Path, capsys):
    assert run_cli(["run", "-b", "demo", *FAST, "--output-dir", "runs"], capsys).code == 0
    result = run_cli(["report", "runs", "-o", f"{MARKUP}.html"], capsys)
    assert result.code == 0 and f"wrote{MARKUP}.html" in _said(result), result.err
