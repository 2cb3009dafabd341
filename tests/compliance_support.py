"""Helpers for the compliance tests: the official checkout, its scripts, and log edits."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import referee

OFFICIAL = referee.INFERENCE
official = referee.official("compliance/TEST01", "compliance/TEST04")


def run_official(script: str, args: list[str], cwd: Path) -> str:
    """Run ``compliance/<script>`` from the official checkout; return its combined output."""
    proc = referee.run(f"compliance/{script}", *args, cwd=cwd, timeout=120)
    return proc.stdout + proc.stderr


def official_passes(text: str) -> bool:
    return any(line.strip() == "TEST PASS" for line in text.splitlines())


def results_layout(root: Path, perf_run: Path, acc_run: Path | None) -> Path:
    """A scenario directory in the submission layout, from our run directories."""
    run_1 = root / "performance" / "run_1"
    run_1.mkdir(parents=True)
    for name in ("mlperf_log_summary.txt", "mlperf_log_detail.txt"):
        shutil.copy2(perf_run / name, run_1 / name)
    if acc_run is not None:
        (root / "accuracy").mkdir()
        shutil.copy2(acc_run / "mlperf_log_accuracy.json", root / "accuracy")
    return root


def set_detail_value(path: Path, key: str, value: object) -> None:
    """Replace the value of every MLLOG event ``key`` in a detail log."""
    out = []
    for line in path.read_text().splitlines():
        if line.startswith(":::MLLOG") and f'"key": "{key}"' in line:
            event = json.loads(line[len(":::MLLOG"):])
            event["value"] = value
            line = ":::MLLOG " + json.dumps(event)
        out.append(line)
    path.write_text("\n".join(out) + "\n")


def get_detail_value(path: Path, key: str) -> object:
    for line in path.read_text().splitlines():
        if f'"key": "{key}"' in line:
            return json.loads(line[len(":::MLLOG"):])["value"]
    raise KeyError(key)


def set_summary_line(path: Path, pattern: str, new_value: str) -> None:
    """Replace the value after ': ' on summary lines matching ``pattern`` (a regex)."""
    out = []
    for line in path.read_text().splitlines():
        if re.match(pattern, line):
            line = line.split(": ", 1)[0] + ": " + new_value
        out.append(line)
    path.write_text("\n".join(out) + "\n")


def get_summary_value(path: Path, pattern: str) -> str:
    for line in path.read_text().splitlines():
        if re.match(pattern, line):
            return line.split(": ", 1)[1].strip()
    raise KeyError(pattern)
