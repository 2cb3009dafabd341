"""Real demo runs in a few settings, made once per test session for the store/compare/report
tests. Runs are started two at a time as separate `mlharness run` processes, so the index also
sees two runs finishing at nearly the same moment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# Short but VALID on any machine: --min-duration 0 makes validity independent of speed;
# the query counts are what LoadGen needs (SingleStream early stopping wants >= 64 queries).
OFFLINE = ["-s", "Offline", "--min-duration", "0", "--min-query-count", "3000",
           "--target-qps", "100"]
DEMO_RUNS: list[tuple[str, list[str]]] = [
    ("", OFFLINE + ["--batch-size", "8"]),
    ("", OFFLINE + ["--batch-size", "32"]),
    ("", ["-s", "SingleStream", "--min-duration", "0", "--min-query-count", "300", "--trace"]),
    ("", ["-s", "Offline", "--mode", "accuracy", "--batch-size", "32"]),
    ("", ["-s", "Offline", "--mode", "accuracy", "--batch-size", "8"]),
    # a Server search as `mlharness tune` keeps it: probe runs under <runs>/_tune
    ("_tune", ["-s", "Server", "--min-duration", "0", "--min-query-count", "800",
               "--target-qps", "200"]),
    ("_tune", ["-s", "Server", "--min-duration", "0", "--min-query-count", "800",
               "--target-qps", "400"]),
]

_made: dict[str, Path] = {}


def mlharness(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "mlharness.cli.main", *args],
                          capture_output=True, text=True, timeout=300)
    if check and proc.returncode not in (0, 1):
        raise AssertionError(f"mlharness {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def start(root: Path, sub: str, flags: list[str]) -> subprocess.Popen[str]:
    out = root / sub if sub else root
    return subprocess.Popen([sys.executable, "-m", "mlharness.cli.main", "run", "-b", "demo",
                             *flags, "--output-dir", str(out), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def make_demo_runs(root: Path) -> Path:
    """Run DEMO_RUNS into ``root`` (two at a time) and return it."""
    for i in range(0, len(DEMO_RUNS), 2):
        procs = [start(root, sub, flags) for sub, flags in DEMO_RUNS[i:i + 2]]
        for proc in procs:
            out, _ = proc.communicate(timeout=300)
            assert proc.returncode in (0, 1), out  # 1 = INVALID is fine; 3 = failed is not
    return root


def demo_runs(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """The session's shared runs folder (made on first use)."""
    if "root" not in _made:
        _made["root"] = make_demo_runs(tmp_path_factory.mktemp("store") / "runs")
    return _made["root"]
