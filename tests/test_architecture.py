"""The house keeps its plan: the layers of docs/architecture.md hold (import-linter, every
import statement counted, function-level ones too), the page lists the same layers as the
checked contract, and the source passes the linter and the type checker."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = BIN / name
    assert path.is_file(), f"{name} is missing: it is in the dev extra (make test installs it)"
    return str(path)


def _contracts() -> dict[str, dict]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {c["id"]: c for c in data["tool"]["importlinter"]["contracts"]}


def test_import_contracts_hold() -> None:
    done = subprocess.run([_tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    kept = re.search(r"Contracts: (\d+) kept, (\d+) broken", done.stdout)
    assert kept and int(kept.group(2)) == 0 and int(kept.group(1)) == len(_contracts())


def test_architecture_page_lists_the_checked_layers() -> None:
    """docs/architecture.md's "Layers" block is the contract, top to bottom, word for word."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"<!-- layers: checked.*?-->\n```\n(.*?)```", page, re.S)
    assert block, "docs/architecture.md lost its checked layers block"
    shown = [" | ".join(p.strip() for p in line.split("|")) for line in
             block.group(1).strip().splitlines()]
    layers = [layer.replace("mlharness.", "") for layer in _contracts()["layers"]["layers"]]
    assert shown == layers
    exceptions = _contracts()["layers"].get("ignore_imports", [])
    for rule in exceptions:  # every exception the contract allows is named on the page
        assert rule.replace("mlharness.", "") in page, rule


def test_source_passes_the_linter() -> None:
    done = subprocess.run([_tool("ruff"), "check", "--no-cache", "src"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_source_type_checks(tmp_path: Path) -> None:
    done = subprocess.run([_tool("mypy"), "--cache-dir", str(tmp_path / "mypy"), "src/mlharness"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
