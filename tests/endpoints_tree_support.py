"""Helpers for the endpoints-format tree tests: the official checker and its endpoints parser in
the referee's Python, and edits of a laid-out tree that stand in for a full-length run."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import referee
from mlharness.submission.official import OfficialResult, parse_output

CHECKER_DIR = referee.INFERENCE / "tools" / "submission"
CHECKER = "tools/submission/submission_checker/main.py"
PARSE = """
import json, sys
from submission_checker.parsers.endpoints_parser import EndpointsParser
out = {}
for kind in ("performance", "accuracy"):
    parser = EndpointsParser(sys.argv[1], kind)
    out[kind] = {key: parser[key] for key in sorted(parser.get_keys())}
print(json.dumps(out))
"""


def official_parse(scen_dir: Path) -> dict[str, dict[str, Any]]:
    """The official ``EndpointsParser``'s values of ``scen_dir`` (first value of each key)."""
    referee.require(CHECKER, python=True)
    proc = subprocess.run([str(referee.REFEREE_PYTHON), "-c", PARSE, str(scen_dir)],
                          cwd=CHECKER_DIR, capture_output=True, text=True, timeout=300,
                          env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _env() -> dict[str, str]:
    import os

    return dict(os.environ, PYTHONDONTWRITEBYTECODE="1")


def official_check(tree: Path, *flags: str, csv: Path | None = None) -> OfficialResult:
    """The pinned v6.1 checker on ``tree`` (its summary CSV kept at ``csv`` when given)."""
    referee.require(CHECKER, python=True)
    out = csv or tree.parent / f"{tree.name}-official.csv"
    cmd = [str(referee.REFEREE_PYTHON), "-m", "submission_checker.main", "--input",
           str(tree.resolve()), "--version", "v6.1", "--csv", str(out), *flags]
    proc = subprocess.run(cmd, cwd=CHECKER_DIR, capture_output=True, text=True, timeout=900,
                          env=_env())
    text = proc.stdout + proc.stderr
    problems, warnings, ok = parse_output(text)
    return OfficialResult(cmd, proc.returncode, problems, warnings, text, ok)


def full_length(tree: Path) -> None:
    """What a fixture cannot reach, written into the tree's copies: each endpoints result's
    configured minimum duration raised to the rules' 600 s."""
    for config in tree.rglob("config.yaml"):
        text = config.read_text()
        config.write_text(re.sub(r"(min_duration_ms: )\d+", r"\g<1>600000", text))


def edit_json(path: Path, change: dict[str, Any]) -> None:
    """Set dot-path keys of a JSON file (``{"latency.early_stopping_percentiles.99.0": 1}``)."""
    data = json.loads(path.read_text())
    for dotted, value in change.items():
        node = data
        *parents, last = _split(dotted)
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    path.write_text(json.dumps(data))


def _split(dotted: str) -> list[str]:
    """Dot path parts, a percentile (``99.0``, ``99.9``) kept whole."""
    parts = dotted.split(".")
    out: list[str] = []
    for part in parts:
        if out and out[-1].isdigit() and part.isdigit():
            out[-1] = f"{out[-1]}.{part}"
        else:
            out.append(part)
    return out
