"""Catalogue: submission input (which runs `submit` takes, and why) and archives given to `check`.

Real runs (resnet50 on a tiny synthetic ImageNet set, real LoadGen) are made once; each case
copies them and damages or adds run directories the way a crash, a tuning session or a hostile
user would. `submit` must never take a probe, audit, unfinished or unreadable run as a result,
must say what it chose and skipped, and `check` must flag unsafe archive members.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from catalogue_support import assert_clean_error, run_cli, snapshot

SUBMIT = ["submit", "--submitter", "MyOrg", "--division", "open", "--system", "tiny"]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from mlharness.runner import execute
    from mlharness.spec import RunSpec
    from synthetic_vision import make_imagenet, resnet50_onnx

    root = tmp_path_factory.mktemp("catalogue-submit")
    data, cache = root / "imagenet", root / "cache"
    make_imagenet(data, count=8, seed=3)
    model = resnet50_onnx(root / "tiny.onnx")
    runs = root / "runs"
    base = dict(benchmark="resnet50", scenario="Offline", model=model, dataset=data,
                cache_dir=cache, output_dir=runs, valid=False)
    perf = execute(RunSpec(**base, target_qps=2000, min_duration=200))
    acc = execute(RunSpec(**base, mode="accuracy"))
    assert perf.status == acc.status == "ok"
    system = root / "tiny.json"
    system.write_text(json.dumps({"system_name": "tiny"}))
    tree = root / "tree"
    from mlharness.submission import submit

    submit(runs, tree, "MyOrg", "open", "tiny", system_json=system)
    return {"runs": runs, "perf": perf.run_dir, "acc": acc.run_dir, "system": system,
            "tree": tree}


@pytest.fixture
def ws(made: dict, tmp_path: Path, monkeypatch) -> Path:
    shutil.copytree(made["runs"], tmp_path / "runs", symlinks=True)
    shutil.copyfile(made["system"], tmp_path / "tiny.json")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _perf(ws: Path) -> Path:
    return next(p for p in (ws / "runs" / "resnet50").iterdir() if "performance" in p.name)


def _acc(ws: Path) -> Path:
    return next(p for p in (ws / "runs" / "resnet50").iterdir() if "accuracy" in p.name)


def _clone(src: Path, dst: Path, **changes) -> Path:
    """A copy of run ``src`` at ``dst`` whose run.json gets ``changes`` and a later stamp."""
    shutil.copytree(src, dst)
    record = json.loads((dst / "run.json").read_text())
    record.update(finished="2099-01-01T00:00:00+00:00", started="2099-01-01T00:00:00+00:00")
    for key, value in changes.items():
        if key == "spec":
            record["spec"].update(value)
        else:
            record[key] = value
    (dst / "run.json").write_text(json.dumps(record))
    return dst


def _submit(ws: Path, capsys, *extra: str):
    system = [] if "--system-toml" in extra else ["--system-json", "tiny.json"]
    return run_cli([*SUBMIT, "--runs", "runs", *system, "--output", "out", *extra], capsys)


# ---- which run is taken -----------------------------------------------------------------------
DECOYS = [
    # (id, make the newer decoy performance run in ws, fragment of the reason it is skipped)
    ("probe-under-tune",
     lambda ws: _clone(_perf(ws), ws / "runs" / "_tune" / "resnet50" / "probe",
                       spec={"min_duration": 1000, "min_query_count": 1}),
     "probe run (under _tune/)"),
    ("probe-by-purpose", lambda ws: _clone(_perf(ws), ws / "runs" / "resnet50" / "p2",
                                           purpose="probe"), "a probe run, not a result"),
    ("left-running", lambda ws: _clone(_perf(ws), ws / "runs" / "resnet50" / "r2",
                                       status="running", pid=2**22 + 7, host="elsewhere"),
     "left at 'running'"),
    ("failed", lambda ws: _clone(_perf(ws), ws / "runs" / "resnet50" / "f2", status="failed",
                                 error={"message": "backend raised"}), "backend raised"),
    ("interrupted", lambda ws: _clone(_perf(ws), ws / "runs" / "resnet50" / "i2",
                                      status="interrupted"), "interrupted"),
    ("run-json-list", lambda ws: (_clone(_perf(ws), ws / "runs" / "resnet50" / "l2"),
                                  (ws / "runs/resnet50/l2/run.json").write_text("[1]")),
     "not an object"),
    ("run-json-not-utf8", lambda ws: (_clone(_perf(ws), ws / "runs" / "resnet50" / "u2"),
                                      (ws / "runs/resnet50/u2/run.json").write_bytes(b"\xff")),
     "unreadable run.json"),
    ("spec-null", lambda ws: _set(_clone(_perf(ws), ws / "runs" / "resnet50" / "n2"),
                                  spec=None), "no run settings"),
    ("audit-run", lambda ws: _clone(_perf(ws), ws / "runs" / "compliance" / "TEST04" / "a2",
                                    spec={"audit_config": "TEST04/audit.config"}),
     "compliance audit run"),
    ("older-test-run", lambda ws: _set(_clone(_perf(ws), ws / "runs" / "resnet50" / "o2"),
                                       finished="2000-01-01T00:00:00+00:00"),
     "not chosen"),
]


def _set(run: Path, **changes) -> Path:
    record = json.loads((run / "run.json").read_text())
    record.update(changes)
    (run / "run.json").write_text(json.dumps(record))
    return run


@pytest.mark.parametrize("case", DECOYS, ids=[c[0] for c in DECOYS])
def test_submit_never_takes_a_decoy_and_says_why(case, ws: Path, capsys):
    _, make, fragment = case
    make(ws)
    runs_before = snapshot(ws / "runs")
    result = _submit(ws, capsys)
    assert result.code == 1, result.err  # laid out; `check` reports the --test duration
    assert "Traceback" not in result.out + result.err
    out = " ".join(result.out.split())
    assert f"{_perf(ws).name} + {_acc(ws).name}" in out
    assert "not used" in out and fragment in out, out
    assert snapshot(ws / "runs") == runs_before  # runs are only read


def test_a_valid_run_beats_a_newer_test_run(ws: Path, capsys):
    valid = _clone(_perf(ws), ws / "runs" / "resnet50" / "v1", spec={"valid": True})
    _set(valid, finished="2001-01-01T00:00:00+00:00")
    result = _submit(ws, capsys)
    out = " ".join(result.out.split())
    assert "v1 +" in out and "newest --valid run" in out


def test_run_flag_picks_by_hand(ws: Path, capsys):
    older = _set(_clone(_perf(ws), ws / "runs" / "resnet50" / "hand"),
                 finished="2000-01-01T00:00:00+00:00")
    result = _submit(ws, capsys, "--run", str(older))
    out = " ".join(result.out.split())
    assert result.code == 1 and "hand +" in out and "chosen with --run" in out


def test_corrupt_real_run_is_reported_and_no_probe_takes_its_place(ws: Path, capsys):
    (_perf(ws) / "run.json").write_text("{broken")
    _clone(_acc(ws), ws / "runs" / "_tune" / "x", spec={"mode": "performance"})
    before = snapshot(ws)
    result = _submit(ws, capsys)
    assert_clean_error(result, 2, "nothing to lay out")
    assert snapshot(ws, skip=("out",)) == before


BAD_SUBMIT = [
    # (id, setup(ws) -> extra argv, fragment)
    ("run-flag-missing", lambda ws: ["--run", "nowhere"], "not a directory"),
    ("run-flag-running", lambda ws: ["--run", str(_set(_perf(ws), status="running", pid=1,
                                                        host="elsewhere"))], "left at 'running'"),
    ("run-flag-audit", lambda ws: ["--run", str(_clone(_perf(ws), ws / "a1",
                                                       spec={"audit_config": "x/audit.config"}))],
     "compliance audit run"),
    ("run-flag-json-list", lambda ws: ["--run", str(_perf(ws))]
     if (_perf(ws) / "run.json").write_text("[]") else [], "not an object"),
    ("run-flag-probe", lambda ws: ["--run", str(_clone(_perf(ws), ws / "runs" / "_tune" / "p"))],
     "probe run"),
    ("run-flag-twice", lambda ws: ["--run", str(_perf(ws)), "--run",
                                   str(_clone(_perf(ws), ws / "twin"))], "given twice"),
    ("runs-missing", lambda ws: ["--runs", "nowhere"], "runs directory not found"),
    ("system-json-list", lambda ws: ["--system-json", "list.json"]
     if (ws / "list.json").write_text("[]") else [], "not an object"),
    ("system-json-missing", lambda ws: ["--system-json", "none.json"], "system JSON not found"),
    ("submitter-escapes", lambda ws: ["--submitter", "../evil"], "bad submitter name"),
    ("system-toml-missing", lambda ws: ["--system-toml", "none.toml"], "none.toml"),
]


@pytest.mark.parametrize("case", BAD_SUBMIT, ids=[c[0] for c in BAD_SUBMIT])
def test_bad_submit_input_is_one_clear_line(case, ws: Path, capsys):
    _, setup, fragment = case
    extra = setup(ws)
    before = snapshot(ws)
    result = _submit(ws, capsys, *extra)
    assert_clean_error(result, 2, fragment)
    assert snapshot(ws) == before


# ---- archives given to check --------------------------------------------------------------------
def _archive(path: Path, members: list[tuple[str, str]]) -> Path:
    """A .tar.gz with ``(name, kind)`` members: kind is file, symlink, hardlink or fifo."""
    with tarfile.open(path, "w:gz") as tar:
        for name, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                data = b"x"
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                continue
            info.type = {"symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE,
                         "fifo": tarfile.FIFOTYPE}[kind]
            info.linkname = "/etc/passwd"
            tar.addfile(info)
    return path


ARCHIVES = [
    ("dotdot-member", [("open/MyOrg/../../../evil.txt", "file")], "'..'"),
    ("absolute-member", [("{tmp}/evil.txt", "file")], "absolute path"),  # {tmp}: tmp_path
    ("symlink-member", [("open/MyOrg/link", "symlink")], "a symlink to /etc/passwd"),
    ("hardlink-member", [("open/MyOrg/hard", "hardlink")], "a hard link to /etc/passwd"),
    ("fifo-member", [("open/MyOrg/pipe", "fifo")], "not a regular file"),
]


@pytest.mark.parametrize("case", ARCHIVES, ids=[c[0] for c in ARCHIVES])
@pytest.mark.parametrize("where", ["beside-tree", "given-directly"])
def test_check_flags_unsafe_archive_members(case, where, made: dict, tmp_path: Path, capsys):
    _, members, fragment = case
    tree = tmp_path / "tree"
    shutil.copytree(made["tree"], tree)
    members = [(name.format(tmp=tmp_path), kind) for name, kind in members]
    archive = _archive(tree / "submission.tar.gz", members)
    before = snapshot(tmp_path)
    result = run_cli(["check", tree if where == "beside-tree" else archive], capsys)
    out = " ".join(result.out.split())
    assert result.code == 1 and "Traceback" not in out + result.err
    assert "archive" in out.lower() and fragment in out, out
    assert snapshot(tmp_path) == before
    assert not (tmp_path / "evil.txt").exists()


def test_check_reads_a_clean_archive_like_its_tree(made: dict, capsys):
    archive = made["tree"] / "submission.tar.gz"
    from_tree = run_cli(["check", made["tree"], "--json"], capsys)
    from_archive = run_cli(["check", archive, "--json"], capsys)
    codes = lambda text: sorted(p["code"] for p in json.loads(text)["problems"])  # noqa: E731
    assert from_tree.code == from_archive.code == 1
    assert codes(from_tree.out) == codes(from_archive.out)
    assert "test-duration" in codes(from_archive.out)


def test_check_tree_with_damaged_system_json_is_a_problem_not_a_traceback(made: dict,
                                                                           tmp_path: Path,
                                                                           capsys):
    tree = tmp_path / "tree"
    shutil.copytree(made["tree"], tree)
    (tree / "open" / "MyOrg" / "systems" / "tiny.json").write_text("[]")
    result = run_cli(["check", tree], capsys)
    assert result.code == 1 and "Traceback" not in result.out + result.err
    assert "not a JSON object" in result.out


# ---- a submit that failed half way, then --force ---------------------------------------------
def _failed_submit(ws: Path, monkeypatch) -> None:
    """A submit whose summaries hit a full disk after the tree was laid out."""
    import errno

    from mlharness.submission import submit, summary

    def full_disk(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(summary, "write", full_disk)
        with pytest.raises(OSError, match="No space"):
            submit(ws / "runs", ws / "out", "MyOrg", "open", "tiny",
                   system_json=ws / "tiny.json")


@pytest.mark.parametrize("where", ["open/mine.txt", "mine.txt", "open/MyOrg/notes/mine.txt"])
def test_force_after_a_failed_submit_keeps_what_the_user_added(where, ws: Path, capsys,
                                                              monkeypatch):
    """The reproduced data loss: a submit fails half way, the user puts files in the tree,
    the next ``submit --force`` must refuse and name them, deleting nothing."""
    _failed_submit(ws, monkeypatch)
    marker = json.loads((ws / "out" / ".mlharness-owned").read_text())
    assert marker["files"], "the marker lists what the failed submit wrote"
    mine = ws / "out" / where
    mine.parent.mkdir(parents=True, exist_ok=True)
    mine.write_text("the user's own file")
    before = snapshot(ws / "out")
    result = _submit(ws, capsys, "--force")
    assert_clean_error(result, 2, where)
    assert snapshot(ws / "out") == before
    assert mine.read_text() == "the user's own file"


def test_force_after_a_failed_submit_replaces_only_its_own_files(ws: Path, capsys, monkeypatch):
    _failed_submit(ws, monkeypatch)
    result = _submit(ws, capsys, "--force")
    assert result.code in (0, 1), result.err  # 1: the tiny fixture's own findings
    assert "Traceback" not in result.err and "replaced" in result.out + result.err
    assert (ws / "out" / "submission.tar.gz").is_file()


@pytest.mark.parametrize("listed", [None, []], ids=["marker-without-list", "marker-empty-list"])
def test_force_with_a_marker_that_lists_nothing_deletes_nothing(listed, ws: Path, capsys):
    """A marker that names no files (an older mlharness, or a crash before the seal) makes every
    file in the directory foreign."""
    out = ws / "out"
    (out / "open").mkdir(parents=True)
    marker = {"created_by": "mlharness", "kind": "submission"}
    if listed is not None:
        marker["files"] = listed
    (out / ".mlharness-owned").write_text(json.dumps(marker))
    (out / "open" / "mine.txt").write_text("x")
    (out / "summary.csv").write_text("a name mlharness also writes, but it did not write this")
    before = snapshot(out)
    result = _submit(ws, capsys, "--force")
    assert_clean_error(result, 2, "did not write")
    assert snapshot(out) == before
