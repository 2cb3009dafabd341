"""Find the run directories (``run.json`` + LoadGen logs) and compliance verifications to lay out."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.errors import ConfigError
from mlharness.files import sha256_file

RUN_FORMAT = "mlharness-run/1"
COMPLIANCE_TESTS = ("TEST01", "TEST04")


@dataclass
class Run:
    """One run directory as the runner wrote it."""

    path: Path
    record: dict[str, Any]

    @property
    def benchmark(self) -> str:
        return str(self.record.get("benchmark", ""))

    @property
    def spec(self) -> dict[str, Any]:
        return self.record.get("spec") or {}

    @property
    def scenario(self) -> str:
        return str(self.spec.get("scenario") or (self.record.get("result") or {}).get("scenario", ""))

    @property
    def mode(self) -> str:
        return str(self.spec.get("mode", ""))

    @property
    def ok(self) -> bool:
        return self.record.get("status") == "ok"

    @property
    def short(self) -> bool:
        return bool(self.spec.get("short", False))

    @property
    def is_audit(self) -> bool:
        return bool(self.spec.get("audit_config"))

    @property
    def audit_test(self) -> str | None:
        """TEST01/TEST04 for an audit run (from its audit.config path or content), else None."""
        if not self.is_audit:
            return None
        for test in COMPLIANCE_TESTS:
            if test in str(self.spec.get("audit_config")):
                return test
        conf = self.path / "audit.config"
        text = conf.read_text(errors="replace") if conf.is_file() else ""
        if "performance_issue_same" in text:
            return "TEST04"
        if "accuracy_log_sampling_target" in text or "accuracy_log_rng_seed" in text:
            return "TEST01"
        return None

    @property
    def stamp(self) -> str:
        return str(self.record.get("finished") or self.record.get("started") or self.path.name)


@dataclass
class Verification:
    """An official-shaped compliance output: ``<dir>/TEST0X/verify_*.txt`` + copied logs."""

    test: str
    path: Path  # the TEST0X directory
    benchmark: str
    scenario: str
    stamp: str


@dataclass
class Inventory:
    """What ``--runs`` holds, newest first per key."""

    runs: list[Run] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    verifications: list[Verification] = field(default_factory=list)

    def newest(self, benchmark: str, scenario: str, mode: str) -> Run | None:
        """The newest successful, non-audit run for this key."""
        found = [r for r in self.runs if r.ok and not r.is_audit and r.benchmark == benchmark
                 and r.scenario == scenario and r.mode == mode]
        return max(found, key=lambda r: r.stamp, default=None)

    def keys(self) -> list[tuple[str, str]]:
        """(benchmark, scenario) pairs with a successful performance run."""
        pairs = {(r.benchmark, r.scenario) for r in self.runs
                 if r.ok and not r.is_audit and r.mode == "performance"}
        return sorted(pairs)

    def audit(self, test: str, benchmark: str, scenario: str) -> Run | None:
        """The newest successful audit run of ``test`` for this key."""
        found = [r for r in self.runs if r.ok and r.audit_test == test and r.benchmark == benchmark
                 and r.scenario == scenario]
        return max(found, key=lambda r: r.stamp, default=None)

    def verification(self, test: str, benchmark: str, scenario: str) -> Verification | None:
        found = [v for v in self.verifications
                 if v.test == test and v.benchmark == benchmark and v.scenario == scenario]
        return max(found, key=lambda v: v.stamp, default=None)


def read_run(path: Path) -> Run:
    """Load ``path/run.json``; raise ConfigError when it is not a run directory."""
    try:
        record = json.loads((path / "run.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: unreadable run.json ({exc})",
                          hint="point --runs at directories written by `mlharness run`") from exc
    if record.get("format") != RUN_FORMAT:
        raise ConfigError(f"{path}/run.json has format {record.get('format')!r}",
                          hint=f"expected {RUN_FORMAT}; re-run with this mlharness version")
    return Run(path, record)


def _digest(path: Path) -> str | None:
    return sha256_file(path) if path.is_file() else None


def _owner(test_dir: Path, audits: dict[str, Run]) -> Run | None:
    """The audit run whose detail log the verification copied (matched by content)."""
    digest = _digest(test_dir / "performance" / "run_1" / "mlperf_log_detail.txt")
    return audits.get(digest) if digest else None


def _through_link(path: Path, root: Path) -> bool:
    """Whether ``path`` (under ``root``) is reached through a symlinked file or directory."""
    rel = path.relative_to(root)
    return any((root / part).is_symlink() for part in [rel, *rel.parents] if part != Path("."))


def scan(root: Path, extra: list[Path] | None = None) -> Inventory:
    """Every run directory under ``root`` and compliance verification (``TEST0X/`` as the
    official run_verification.py writes it) under ``root`` and ``extra`` (symlinks not followed)."""
    if not root.is_dir():
        raise ConfigError(f"runs directory not found: {root}",
                          hint="pass --runs pointing at the folder `mlharness run` wrote (runs/)")
    inv = Inventory()
    for run_json in sorted(root.rglob("run.json")):
        if _through_link(run_json, root):
            continue
        try:
            inv.runs.append(read_run(run_json.parent))
        except ConfigError as exc:
            inv.skipped.append((run_json.parent, exc.message))
    audits = {_digest(r.path / "mlperf_log_detail.txt"): r for r in inv.runs if r.is_audit}
    for test in COMPLIANCE_TESTS:
        for verify in sorted(p for base in [root, *(extra or [])]
                             for p in base.rglob(f"{test}/verify_performance.txt")
                             if not _through_link(p, base)):
            test_dir = verify.parent
            run = _owner(test_dir, audits)
            if run is None:
                inv.skipped.append((test_dir, "its audit run is not among the runs"))
                continue
            inv.verifications.append(Verification(test, test_dir, run.benchmark, run.scenario,
                                                  run.stamp))
    return inv
