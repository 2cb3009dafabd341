"""The house keeps its plan: the layers of docs/architecture.md hold (import-linter, every
import statement counted, function-level ones too), the page lists the same layers as the
checked contract, a project import inside a function says why it is there, and the source
passes the linter and the type checker."""

from __future__ import annotations

import ast
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


def _imports_project(node: ast.AST) -> bool:
    """Whether ``node`` is ``import mlharness...`` or ``from mlharness... import ...``."""
    if isinstance(node, ast.ImportFrom):
        names = [] if node.level else [node.module or ""]
    elif isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        return False
    return any(n == "mlharness" or n.startswith("mlharness.") for n in names)


def _function_level_project_imports(tree: ast.Module) -> set[int]:
    """The line numbers of the project imports inside a function (nested ones counted once)."""
    return {node.lineno for func in ast.walk(tree)
            if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef))
            for node in ast.walk(func) if _imports_project(node)}


def unexplained_lazy_imports(src: Path) -> list[str]:
    """``path:line`` of each function-level project import without a ``# lazy:`` comment on its
    line or above it (one comment above a run of imports explains the run)."""
    found = []
    for path in sorted(src.rglob("*.py")):
        lines = path.read_text().splitlines()
        for lineno in sorted(_function_level_project_imports(ast.parse(path.read_text()))):
            row = lineno - 1
            while row > 0 and "# lazy:" not in lines[row] \
                    and re.match(r"\s*(from \S+ )?import ", lines[row - 1]):
                row -= 1
            if not any("# lazy:" in lines[r] for r in (row, row - 1) if r >= 0):
                found.append(f"{path.relative_to(src.parent)}:{lineno}")
    return found


def test_function_level_project_imports_say_why() -> None:
    """A project module imported inside a function, not at its module's top, says why it must
    wait (``# lazy: ...``): mlperf_loadgen never in the parent, torch only with a model, the
    runner and tune out of `mlharness --help`, ..."""
    unexplained = unexplained_lazy_imports(ROOT / "src" / "mlharness")
    assert not unexplained, "project imports in a function without a # lazy: reason: " + \
        ", ".join(unexplained)


def test_source_tests_and_benchmarks_pass_the_linter() -> None:
    done = subprocess.run([_tool("ruff"), "check", "--no-cache", "src", "tests", "benchmarks"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_source_type_checks(tmp_path: Path) -> None:
    done = subprocess.run([_tool("mypy"), "--cache-dir", str(tmp_path / "mypy"), "src/mlharness"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
