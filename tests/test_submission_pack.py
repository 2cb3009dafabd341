"""Packing and truncation: archive safety (symlinks never followed) and the official truncation."""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from pathlib import Path

import pytest

import referee
from mlharness.errors import ConfigError
from mlharness.submission import pack, truncate
from mlharness.submission.files import prepare_output, seal_output


def _tree(root: Path) -> None:
    (root / "open" / "Org" / "results").mkdir(parents=True)
    (root / "open" / "Org" / "results" / "a.txt").write_text("inside")


def test_archive_holds_only_the_tree(tmp_path: Path):
    root = tmp_path / "sub"
    _tree(root)
    archive = root / "submission.tar.gz"
    assert pack.pack(root, ["open"], archive) == []
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert names == ["open", "open/Org", "open/Org/results", "open/Org/results/a.txt"]
    assert pack.verify_archive(archive) == []


def test_symlinks_out_of_the_tree_are_never_followed(tmp_path: Path):
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key.txt").write_text("do not pack")
    root = tmp_path / "sub"
    _tree(root)
    base = root / "open" / "Org" / "results"
    os.symlink(secret / "key.txt", base / "leak.txt")
    os.symlink(secret, base / "leakdir")
    os.symlink("a.txt", base / "inside_link.txt")
    archive = tmp_path / "out.tar.gz"
    skipped = pack.pack(root, ["open"], archive)
    assert {p.name for p in skipped} == {"leak.txt", "leakdir", "inside_link.txt"}
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        assert all(m.isfile() or m.isdir() for m in members)
        assert all("key" not in m.name and "leak" not in m.name for m in members)
        data = b"".join(tar.extractfile(m).read() for m in members if m.isfile())
    assert b"do not pack" not in data


def test_top_level_symlink_is_refused(tmp_path: Path):
    (tmp_path / "elsewhere" / "Org").mkdir(parents=True)
    root = tmp_path / "sub"
    root.mkdir()
    os.symlink(tmp_path / "elsewhere", root / "open")
    with pytest.raises(ConfigError):
        pack.pack(root, ["open"], tmp_path / "x.tar.gz")


def test_unsafe_names():
    assert pack.safe_name("open/Org/x")
    assert not pack.safe_name("/etc/passwd")
    assert not pack.safe_name("open/../../x")


def test_truncation_matches_the_official_tool(tmp_path: Path):
    acc = tmp_path / "accuracy"
    acc.mkdir()
    entries = [{"seq_id": i, "qsl_idx": i, "data": "0000803F"} for i in range(2000)]
    text = "[\n" + ",\n".join(json.dumps(e) for e in entries) + "\n]\n"
    (acc / "mlperf_log_accuracy.json").write_text(text)
    (acc / "accuracy.txt").write_text("accuracy=1.000%, good=20, total=2000\n")
    digest = truncate.truncate_dir(acc)
    assert digest == hashlib.sha256(text.encode()).hexdigest()
    assert (acc / "accuracy.txt").read_text().endswith(f"\nhash={digest}\n")
    out = (acc / "mlperf_log_accuracy.json").read_text()
    assert out == text[:4096] + "\n\n...\n\n" + text[-4096:]
    assert truncate.is_truncated(acc)
    assert truncate.truncate_dir(acc) is None  # idempotent, like the official tool


def test_small_logs_keep_their_content_but_get_a_hash(tmp_path: Path):
    acc = tmp_path / "accuracy"
    acc.mkdir()
    (acc / "mlperf_log_accuracy.json").write_text("[\n]\n")
    (acc / "accuracy.txt").write_text("")
    truncate.truncate_dir(acc)
    assert (acc / "mlperf_log_accuracy.json").read_text() == "[\n]\n"
    assert "hash=" in (acc / "accuracy.txt").read_text()


def test_output_is_never_overwritten_silently(tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep").write_text("x")
    with pytest.raises(ConfigError, match="not empty"):
        prepare_output(out, force=False)
    with pytest.raises(ConfigError, match="mlharness did not create it"):
        prepare_output(out, force=True)  # not ours: never deleted
    assert (out / "keep").read_text() == "x"
    (out / "keep").unlink()
    prepare_output(out, force=False)  # empty: taken and marked
    (out / "open").mkdir()
    (out / "open" / "x.txt").write_text("not listed in the marker: someone else's")
    with pytest.raises(ConfigError, match="did not write"):
        prepare_output(out, force=True)
    seal_output(out)  # what submit does once it wrote the tree: now it is ours
    assert "replaced" in (prepare_output(out, force=True) or "")
    assert [p.name for p in out.iterdir()] == [".mlharness-owned"]


def test_runs_reached_through_symlinks_are_ignored(tmp_path: Path):
    from mlharness.submission.runs import scan

    outside = tmp_path / "outside" / "run1"
    outside.mkdir(parents=True)
    (outside / "run.json").write_text(json.dumps({"format": "mlharness-run/1", "status": "ok"}))
    runs = tmp_path / "runs"
    runs.mkdir()
    os.symlink(tmp_path / "outside", runs / "linked")
    assert scan(runs).runs == []


@referee.official("tools/submission/truncate_accuracy_log.py", python=True)
@pytest.mark.parametrize("entries", [2000, 300, 2])  # truncated, kept whole, tiny
def test_truncation_equals_the_official_tool(tmp_path: Path, entries: int):
    """Result and TEST01 accuracy logs of one tree, truncated by us and by the official tool."""
    rows = [{"seq_id": i, "qsl_idx": i % 97, "data": f"{i:08X}"} for i in range(entries)]
    text = "[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n"
    scen = Path("open", "Org", "results", "sys", "resnet", "Offline")
    ours = tmp_path / "ours"
    for acc in (ours / scen / "accuracy", ours / scen / "TEST01" / "accuracy"):
        acc.mkdir(parents=True)
        (acc / "mlperf_log_accuracy.json").write_text(text)
        (acc / "accuracy.txt").write_text("accuracy=1.000%, good=20, total=2000\n")
    theirs = tmp_path / "theirs"
    referee.run("tools/submission/truncate_accuracy_log.py", "--input", str(ours), "--output",
                str(theirs), "--submitter", "Org", check=True)
    for acc in (ours / scen / "accuracy", ours / scen / "TEST01" / "accuracy"):
        truncate.truncate_dir(acc)
    files = sorted(p.relative_to(ours) for p in ours.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(theirs) for p in theirs.rglob("*") if p.is_file())
    for rel in files:
        assert (ours / rel).read_bytes() == (theirs / rel).read_bytes(), rel
