"""What the package claims is what it has: Python floor, dependencies, extras, commands."""

from __future__ import annotations

import argparse
import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from mlharness.backends import BACKENDS
from mlharness.cli.main import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: dependencies mlharness itself never imports, and why they are declared all the same
NOT_IMPORTED = {
    "pyyaml": "the official submission checker, run by `check --official` in this interpreter",
    "httptools": "uvicorn's HTTP parser for `serve` nodes",
    "uvloop": "uvicorn's event loop for `serve` nodes",
}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _floor() -> tuple[int, int]:
    m = re.fullmatch(r">=\s*(\d+)\.(\d+)", PYPROJECT["requires-python"].strip())
    assert m, PYPROJECT["requires-python"]
    return int(m.group(1)), int(m.group(2))


def test_sources_parse_at_the_python_floor() -> None:
    """No syntax newer than requires-python (the suite itself runs on the floor in CI)."""
    floor = _floor()
    assert sys.version_info[:2] >= floor
    for path in [*(ROOT / "src").rglob("*.py"), *(ROOT / "tests").glob("*.py")]:
        ast.parse(path.read_text(), str(path), feature_version=floor)


def test_every_dependency_is_imported_or_explained() -> None:
    modules_of: dict[str, set[str]] = {}
    for module, dists in metadata.packages_distributions().items():
        for dist in dists:
            modules_of.setdefault(_norm(dist), set()).add(module)
    imported: set[str] = set()
    for path in (ROOT / "src" / "mlharness").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    for requirement in PYPROJECT["dependencies"]:
        name = _norm(re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0])
        if name in NOT_IMPORTED:
            continue
        modules = modules_of.get(name)
        assert modules, f"{name} is declared but not installed"
        assert modules & imported, f"{name} is declared but mlharness never imports it"


def test_backend_install_hints_name_real_extras() -> None:
    extras = set(PYPROJECT["optional-dependencies"])
    for name, (_, extra) in BACKENDS.items():  # "llm,torch": pip install 'mlharness[llm,torch]'
        for one in filter(None, extra.split(",")):
            assert one in extras, f"backend {name}: no extra mlharness[{one}]"


def test_every_command_module_registers_its_command() -> None:
    [sub] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(sub.choices) == list(COMMANDS)


def test_a_broken_command_module_is_loud(monkeypatch: pytest.MonkeyPatch) -> None:
    import mlharness.cli.main as cli_main

    monkeypatch.setattr(cli_main, "COMMANDS", (*COMMANDS, "no_such_command"))
    with pytest.raises(ModuleNotFoundError, match="no_such_command"):
        cli_main.build_parser()
