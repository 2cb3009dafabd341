"""Find the official MLCommons power client, server and compliance checker, and run the checker.

They come from github.com/mlcommons/power-dev and are run unchanged, as subprocesses: the
checker (``compliance/check.py``) verifies the sha1 of every client/server source file against
``compliance/sources_checksums.json``, so a submission must use them exactly as published.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from mlharness.errors import ConfigError

ENV_VAR = "MLPERF_POWER_DEV"
HINT = ("pass --power-dev PATH to a checkout of github.com/mlcommons/power-dev (or set "
        f"{ENV_VAR}), or install it: pip install git+https://github.com/mlcommons/power-dev")


@dataclass
class PowerDev:
    """Where the official power code is. ``root`` holds ``ptd_client_server/``."""

    root: Path
    source: str  # flag | env | package

    @property
    def client(self) -> Path:
        return self.root / "ptd_client_server" / "client.py"

    @property
    def server(self) -> Path:
        return self.root / "ptd_client_server" / "server.py"

    @property
    def check(self) -> Path | None:
        """``compliance/check.py`` of a checkout, else ``power_check`` on PATH (a pip install
        renames it so, with its sources_checksums.json beside it)."""
        path = self.root / "compliance" / "check.py"
        if path.is_file():
            return path
        found = shutil.which("power_check")
        return Path(found) if found else None


def _valid(root: Path) -> bool:
    return (root / "ptd_client_server" / "lib" / "client.py").is_file()


def find_power_dev(path: Path | None = None) -> PowerDev:
    """``--power-dev PATH``, else ``$MLPERF_POWER_DEV``, else an installed ``ptd_client_server``."""
    for given, source in ((path, "flag"), (os.environ.get(ENV_VAR), "env")):
        if given:
            root = Path(given).expanduser().resolve()
            if not _valid(root):
                what = "--power-dev" if source == "flag" else ENV_VAR
                raise ConfigError(f"{what}={given} is not a power-dev checkout "
                                  "(no ptd_client_server/lib/client.py there)", hint=HINT)
            return PowerDev(root, source)
    spec = importlib.util.find_spec("ptd_client_server")
    if spec is not None and spec.submodule_search_locations:
        root = Path(list(spec.submodule_search_locations)[0]).parent
        if _valid(root):
            return PowerDev(root, "package")
    raise ConfigError("--power needs the official MLCommons power client (mlcommons-power), "
                      "and it was not found", hint=HINT)


def clean_env() -> dict[str, str]:
    """Environment for the official tools: no byte-code files written into their tree."""
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}


@dataclass
class CheckReport:
    """``compliance/check.py``'s verdict: each named check passed or failed (with its message)."""

    returncode: int
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    warnings: dict[str, str] = field(default_factory=dict)
    output: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.failed


_CHECK_LINE = re.compile(r"^(INFO|WARNING|ERROR):main:\[(x| )\] (.+)$")


def parse_check_output(text: str) -> CheckReport:
    report = CheckReport(0, output=text)
    current: tuple[str, str] | None = None
    for line in text.splitlines():
        m = _CHECK_LINE.match(line)
        if m:
            level, mark, name = m.groups()
            current = None
            if mark == "x":
                report.passed.append(name)
                if level == "WARNING":
                    current = ("warn", name)
            else:
                report.failed[name] = ""
                current = ("fail", name)
            continue
        if current and line.strip() and ":main:\t" in line:
            message = line.split(":main:\t", 1)[1].strip()
            target = report.failed if current[0] == "fail" else report.warnings
            target[current[1]] = (target.get(current[1], "") + " " + message).strip()
    return report


def run_check(session_dir: Path, dev: PowerDev, timeout: float = 300) -> CheckReport:
    """Run ``compliance/check.py SESSION_DIR`` (a dir with power/, ranging/, run_1/)."""
    if dev.check is None:
        raise ConfigError(f"no compliance/check.py under {dev.root} and no power_check on PATH",
                          hint="point --power-dev at a power-dev checkout")
    proc = subprocess.run([sys.executable, str(dev.check), str(session_dir)], capture_output=True,
                          text=True, timeout=timeout, env=clean_env())
    report = parse_check_output(proc.stdout + proc.stderr)
    report.returncode = proc.returncode
    return report
