"""Find the run directories (``run.json`` + LoadGen logs) and compliance verifications to lay out,
and choose, with reasons, which run stands for each benchmark x scenario x mode.

A run is a candidate only if its record can be trusted (``record.untrusted_reason``: not
left at "running", finished ok, not a probe) and it is not a compliance audit. Among candidates a
``--valid`` run beats a ``--test`` run, then the newest wins; ``--run DIR`` picks one by hand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from mlharness.errors import ConfigError
from mlharness.files import sha256_file
from mlharness.record import RunRecord, read_record, untrusted_reason
from mlharness.rules import DEFAULT_ROUND
from mlharness.spec import RunSpec

COMPLIANCE_TESTS = ("TEST01", "TEST04", "TEST05", "TEST06", "TEST07", "TEST09")
#: the file an official run_verification.py writes its verdict to, per test, and the log its
#: output copied from the audit run (what ties a verification to its audit run)
VERDICT_FILES = {"TEST06": "verify_accuracy.txt", "TEST07": "verify_accuracy.txt",
                 "TEST09": "verify_output_len.txt"}
OWNER_LOGS = {"TEST06": ("accuracy", "mlperf_log_accuracy.json")}


@dataclass
class Run:
    """One run directory as the runner wrote it."""

    path: Path
    record: RunRecord

    @property
    def benchmark(self) -> str:
        return self.record.benchmark

    @property
    def spec(self) -> RunSpec:
        return self.record.spec

    @property
    def scenario(self) -> str:
        return self.spec.scenario

    @property
    def mode(self) -> str:
        return self.spec.mode

    @property
    def problem(self) -> str | None:
        """Why this run cannot be used (see record.untrusted_reason), or None."""
        return untrusted_reason(self.path, self.record)

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def made_for(self) -> str:
        """The round whose seeds the run used: its ``--round``, else the installed LoadGen's
        own (the newest round's)."""
        return self.spec.round or DEFAULT_ROUND

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.benchmark, self.scenario, self.mode)

    @property
    def short(self) -> bool:
        return self.spec.short

    @property
    def is_audit(self) -> bool:
        return self.spec.audit_config is not None

    @property
    def audit_test(self) -> str | None:
        """TEST01 … TEST09 for an audit run (from its audit.config path or content), else None."""
        if not self.is_audit:
            return None
        for test in COMPLIANCE_TESTS:
            if test in str(self.spec.audit_config):
                return test
        conf = self.path / "audit.config"
        text = conf.read_text(errors="replace") if conf.is_file() else ""
        if re.search(r"^\*\.\*\.test05\s*=\s*1", text, re.MULTILINE):
            return "TEST05"
        if "performance_issue_same" in text:
            return "TEST04"
        if "accuracy_log_sampling_target" in text or "accuracy_log_rng_seed" in text:
            return "TEST01"
        return None

    @property
    def stamp(self) -> str:
        return str(self.record.finished or self.record.started or self.path.name)


@dataclass
class Verification:
    """An official-shaped compliance output: ``<dir>/TEST0X/verify_*.txt`` + copied logs."""

    test: str
    path: Path  # the TEST0X directory
    benchmark: str
    scenario: str
    stamp: str


@dataclass
class Choice:
    """The run chosen for one benchmark x scenario x mode, and why."""

    run: Run
    why: str


@dataclass
class Inventory:
    """What ``--runs`` holds; ``pinned`` are the runs given with ``--run``."""

    runs: list[Run] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)  # unreadable run.json etc.
    verifications: list[Verification] = field(default_factory=list)
    pinned: dict[tuple[str, str, str], Run] = field(default_factory=dict)
    #: the round being submitted: only runs made for it are results (None: any round)
    round: str | None = None

    def _of_round(self, run: Run) -> bool:
        return self.round is None or run.made_for == self.round

    def candidates(self, benchmark: str, scenario: str, mode: str) -> list[Run]:
        return [r for r in self.runs if r.ok and not r.is_audit and self._of_round(r)
                and r.key == (benchmark, scenario, mode)]

    def choose(self, benchmark: str, scenario: str, mode: str) -> Choice | None:
        """The run for this key: the one given with --run, else the newest --valid run, else
        the newest --test run."""
        key = (benchmark, scenario, mode)
        if key in self.pinned:
            return Choice(self.pinned[key], "chosen with --run")
        found = self.candidates(benchmark, scenario, mode)
        if not found:
            return None
        valid = [r for r in found if not r.short]
        pool = valid or found
        best = max(pool, key=lambda r: r.stamp)
        others = f" of {len(found)} usable" if len(found) > 1 else ""
        if valid:
            return Choice(best, f"newest --valid run{others}")
        return Choice(best, f"newest run{others} (no --valid run found, so a --test run)")

    def newest(self, benchmark: str, scenario: str, mode: str) -> Run | None:
        choice = self.choose(benchmark, scenario, mode)
        return choice.run if choice else None

    def keys(self) -> list[tuple[str, str]]:
        """(benchmark, scenario) pairs with a usable performance run."""
        pairs = {(r.benchmark, r.scenario) for r in self.runs
                 if r.ok and not r.is_audit and r.mode == "performance" and self._of_round(r)}
        pairs |= {(b, s) for b, s, m in self.pinned if m == "performance"}
        return sorted(pairs)

    def not_chosen(self, chosen: set[Path]) -> list[tuple[Path, str]]:
        """Every run not used as a result, with the reason (audits used for compliance included)."""
        out = list(self.skipped)
        for r in sorted(self.runs, key=lambda r: str(r.path)):
            if r.path in chosen:
                continue
            if r.problem:
                why = r.problem
            elif r.is_audit:
                why = f"a compliance audit run ({r.audit_test or 'unknown test'}), not a result"
            elif r.key in self.pinned:
                why = f"another run was chosen with --run ({self.pinned[r.key].path.name})"
            elif not self._of_round(r):
                why = (f"made for {r.made_for} (its seeds), not {self.round}: re-run it with "
                       f"--round {self.round}, or pick it with --run")
            else:
                pick = self.choose(*r.key)
                why = (f"not chosen: {pick.run.path.name} is the {pick.why}" if pick
                       else "not chosen")
            out.append((r.path, why))
        return out

    def audit(self, test: str, benchmark: str, scenario: str) -> Run | None:
        """The newest successful audit run of ``test`` for this key."""
        found = [r for r in self.runs if r.ok and r.audit_test == test and r.benchmark == benchmark
                 and r.scenario == scenario and self._of_round(r)]
        return max(found, key=lambda r: r.stamp, default=None)

    def verification(self, test: str, benchmark: str, scenario: str) -> Verification | None:
        found = [v for v in self.verifications
                 if v.test == test and v.benchmark == benchmark and v.scenario == scenario]
        return max(found, key=lambda v: v.stamp, default=None)


def read_run(path: Path) -> Run:
    """Load ``path/run.json``; raise ConfigError when it is not a readable run record."""
    return Run(path, read_record(path))


def pin(inventory: Inventory, paths: list[Path]) -> None:
    """``--run DIR``: use exactly these runs (each must be a usable, non-audit result run)."""
    for path in paths:
        if not path.is_dir():
            raise ConfigError(f"--run {path}: not a directory",
                              hint="give a run directory written by `mlharness run`")
        run = read_run(path.resolve())
        if run.problem:
            raise ConfigError(f"--run {path} cannot be used: {run.problem}",
                              hint="choose a run that finished with status ok")
        if run.is_audit:
            raise ConfigError(f"--run {path} is a compliance audit run",
                              hint="audit runs are found under --runs and verified by submit")
        if run.key in inventory.pinned:
            raise ConfigError(f"--run given twice for {' '.join(run.key)}",
                              hint="give one performance and one accuracy run per scenario")
        inventory.pinned[run.key] = run


def _digest(path: Path) -> str | None:
    return sha256_file(path) if path.is_file() else None


def _owner(test: str, test_dir: Path, audits: dict[str, Run]) -> Run | None:
    """The audit run whose log the verification copied (matched by content: the detail log,
    or TEST06's accuracy log, the only one its official script copies)."""
    where = OWNER_LOGS.get(test, ("performance", "run_1", "mlperf_log_detail.txt"))
    digest = _digest(test_dir.joinpath(*where))
    key = where[-1]
    return audits.get(f"{key}:{digest}") if digest else None


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
            inv.runs.append(read_run(run_json.parent.resolve()))
        except ConfigError as exc:
            where = str(run_json.parent.resolve())
            why = exc.message.replace(f"{where}/", "").replace(f"{where}: ", "")
            inv.skipped.append((run_json.parent.resolve(), why))
    audits = {f"{name}:{_digest(r.path / name)}": r for r in inv.runs if r.is_audit
              for name in ("mlperf_log_detail.txt", "mlperf_log_accuracy.json")}
    for test in COMPLIANCE_TESTS:
        verdict = VERDICT_FILES.get(test, "verify_performance.txt")
        for verify in sorted(p for base in [root, *(extra or [])]
                             for p in base.rglob(f"{test}/{verdict}")
                             if not _through_link(p, base)):
            test_dir = verify.parent
            run = _owner(test, test_dir, audits)
            if run is None:
                inv.skipped.append((test_dir, "its audit run is not among the runs"))
                continue
            inv.verifications.append(Verification(test, test_dir, run.benchmark, run.scenario,
                                                  run.stamp))
    return inv
