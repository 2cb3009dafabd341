"""Catalogue: `--force` never deletes what mlharness did not write.

`submit --force` replaces only an --output that an earlier submit created (marked, every file
listed) or an empty one; never the working directory, a parent of it, a git work tree, home, or
a directory holding other files. Each refusal: exit 2, one line naming what would be deleted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from catalogue_support import assert_clean_error, run_cli, snapshot
from mlharness.owned import MARKER

SUBMIT = ["submit", "--submitter", "MyOrg", "--division", "open", "--system", "sys", "--force"]


def _workspace(tmp: Path) -> Path:
    (tmp / "runs").mkdir()
    root = tmp / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("mine")
    (root / "project").mkdir()
    (root / "project" / "main.py").write_text("print('hi')")
    return root


def _git_tree(root: Path) -> None:
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")


def _ours_then_foreign(out: Path) -> None:
    out.mkdir()
    (out / "open").mkdir()
    (out / "open" / "x.txt").write_text("written by submit")
    (out / MARKER).write_text(json.dumps({"created_by": "mlharness", "kind": "submission",
                                          "files": ["open/x.txt"]}))
    (out / "open" / "my-notes.txt").write_text("added by the user afterwards")


def _ours_with_extra_top(out: Path) -> None:
    out.mkdir()
    (out / MARKER).write_text(json.dumps({"created_by": "mlharness", "kind": "submission"}))
    (out / "thesis.tex").write_text("not ours")


def _wrong_kind(out: Path) -> None:
    out.mkdir()
    (out / MARKER).write_text(json.dumps({"created_by": "mlharness", "kind": "verification"}))
    (out / "open").mkdir()


def _file(out: Path) -> None:
    out.write_text("a file")


FORCE_CASES = [
    # (id, cwd below the workspace, --output, setup(workspace), fragment)
    ("output-dot-in-git-checkout", ".", ".", _git_tree, "it is the working directory"),
    ("output-dot", ".", ".", None, "it is the working directory"),
    ("output-parent-of-cwd", "project", "..", None, "contains the working directory"),
    ("output-git-tree", ".", "project", lambda r: _git_tree(r / "project"), "git work tree"),
    ("output-foreign-dir", ".", "project", None, "mlharness did not create it"),
    ("output-ours-then-edited", ".", "out", lambda r: _ours_then_foreign(r / "out"),
     "files mlharness did not write (open/my-notes.txt)"),
    ("output-ours-extra-top", ".", "out", lambda r: _ours_with_extra_top(r / "out"),
     "files mlharness did not write (thesis.tex)"),
    ("output-other-kind", ".", "out", lambda r: _wrong_kind(r / "out"), "did not create it"),
    ("output-is-a-file", ".", "notes.txt", None, "is not a directory"),
    ("output-symlink-to-dir", ".", "link",
     lambda r: (r / "link").symlink_to(r / "project"), "is not a directory"),
    ("output-contains-runs", ".", "..", None, "would contain or replace the runs"),
]


@pytest.mark.parametrize("case", FORCE_CASES, ids=[c[0] for c in FORCE_CASES])
def test_force_refuses_to_delete_what_mlharness_did_not_write(case, tmp_path, capsys,
                                                              monkeypatch):
    _, cwd, output, setup, fragment = case
    root = _workspace(tmp_path)
    if setup:
        setup(root)
    monkeypatch.chdir(root / cwd)
    before = snapshot(tmp_path)
    result = run_cli([*SUBMIT, "--runs", tmp_path / "runs", "--output", output], capsys)
    assert_clean_error(result, 2, fragment)
    assert snapshot(tmp_path) == before


def test_force_without_force_says_not_empty(tmp_path, capsys, monkeypatch):
    root = _workspace(tmp_path)
    monkeypatch.chdir(root)
    before = snapshot(tmp_path)
    result = run_cli([a for a in SUBMIT if a != "--force"]
                     + ["--runs", tmp_path / "runs", "--output", "project"], capsys)
    assert_clean_error(result, 2, "is not empty")
    assert snapshot(tmp_path) == before


def test_force_replaces_a_tree_an_earlier_submit_wrote(tmp_path):
    from mlharness.submission.files import prepare_output, seal_output

    out = tmp_path / "out"
    assert prepare_output(out, force=False) is None
    (out / "open" / "MyOrg").mkdir(parents=True)
    (out / "open" / "MyOrg" / "a.txt").write_text("x")
    (out / "summary.csv").write_text("x")
    seal_output(out)
    said = prepare_output(out, force=True)
    assert said and "2 files" in said
    assert [p.name for p in out.iterdir()] == [MARKER]
