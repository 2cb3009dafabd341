"""Shared pieces of the bad-input and fault catalogue (tests/test_catalogue_*.py).

Every case runs the real CLI (in-process through ``mlharness.cli.main.main``, or as a subprocess
for signals) in a scratch workspace, then asserts three things: the exit code, a one-line error
(plus at most a hint line) without a traceback, and that nothing outside the places the command
may write changed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from mlharness.cli.main import main

TESTS_DIR = Path(__file__).resolve().parent
DEMO_DATA = Path(__file__).resolve().parents[1] / "src" / "mlharness" / "data" / "demo"


def snapshot(root: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple[int, int]]:
    """Every file and link under ``root`` -> (size, mtime_ns), except under the ``skip`` paths
    (relative to root)."""
    out: dict[str, tuple[int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = Path(dirpath).relative_to(root)
        dirnames[:] = [d for d in dirnames if (rel_dir / d).as_posix() not in skip]
        for name in filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]:
            rel = (rel_dir / name).as_posix()
            if rel in skip:
                continue
            st = (Path(dirpath) / name).lstat()
            out[rel] = (st.st_size, st.st_mtime_ns)
        out[rel_dir.as_posix() + "/"] = (0, 0)
    return out


@dataclass
class Outcome:
    code: int
    out: str
    err: str

    @property
    def error_line(self) -> str:
        lines = [ln for ln in self.err.splitlines() if ln.strip()]
        return lines[0] if lines else ""


def run_cli(argv: list[str], capsys: pytest.CaptureFixture) -> Outcome:
    """The CLI in-process; SystemExit (argparse) becomes an exit code."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    captured = capsys.readouterr()
    return Outcome(code, captured.out, captured.err)


def assert_clean_error(result: Outcome, code: int, fragment: str) -> None:
    """Exit ``code``; stderr is ``error: ...`` (+ one hint line) or argparse's usage error,
    mentions ``fragment``, and holds no traceback."""
    assert result.code == code, (result.code, result.out[-2000:], result.err[-2000:])
    assert "Traceback" not in result.err + result.out, result.err
    lines = [ln for ln in result.err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:") or ": error:" in ln]
    assert len(errors) == 1, result.err
    if ln_hint := [ln for ln in lines if ln.strip().startswith("hint:")]:
        assert len(ln_hint) == 1, result.err
    if not errors[0].startswith("usage") and ": error:" not in errors[0]:
        assert len(lines) <= 2, result.err  # error + hint
    assert fragment.lower() in result.err.lower(), (fragment, result.err)


def cli_subprocess(argv: list[str], cwd: Path, env_extra: dict[str, str] | None = None,
                   **popen) -> subprocess.Popen:
    """The CLI as a separate process (for signals), test backends importable; ``env_extra``
    added to its environment."""
    env = {**os.environ, **(env_extra or {}), "PYTHONPATH": os.pathsep.join(
        [str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    return subprocess.Popen([sys.executable, "-m", "mlharness.cli.main", *map(str, argv)],
                            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **popen)


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            out.append(int(entry.name))
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
