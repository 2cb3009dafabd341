"""Lay run directories out as a submission tree: the v6.x layout (``submission_structure.md``,
the ``*_PATH`` tables in ``submission_checker/constants.py``) or, for rounds before v5.0
(``layout = "v4"``), the older one their checkers read (``rounds/<round>/tools/submission/
submission_checker.py`` check_results_dir): ``results/<system>/<benchmark>/<scenario>/``
{performance/run_1, accuracy}, ``measurements/<system>/<benchmark>/<scenario>/`` {mlperf.conf,
user.conf, README.md, <system>_<impl>_<scenario>.json}, ``compliance/<system>/<benchmark>/
<scenario>/TEST0X`` and ``code/<benchmark>/<impl>/``. The v6.x tree::

    <root>/<division>/<submitter>/systems/<system>.json
                                 /src/README.md, src/<benchmark>/settings.json
                                 /results/<system>/<benchmark>/<scenario>/
                                      performance/run_1/mlperf_log_{summary,detail}.txt
                                      performance/run_1/spl.txt, performance/ranging/...,
                                      performance/power/...   (runs measured with --power)
                                      accuracy/mlperf_log_{summary,detail}.txt, mlperf_log_accuracy.json, accuracy.txt
                                      measurements.json, user.conf, README.md
                                      TEST01/..., TEST04/...   (as the official run_verification.py writes them)

The LLM benchmarks lay out the same way; an Interactive result is ``<scenario>`` = ``Interactive`` (LoadGen's logs inside
say Server, which the checker accepts for that directory), with an accuracy run of its own.

A benchmark the checker accepts in the endpoints format (``rules/endpoints_<round>.toml``) may be
laid out in it instead (:func:`result_format`: ``--format endpoints``, or ``auto`` for a
benchmark whose reference writes it, qwen3-vl): the scenario directory then holds
``config.yaml``, ``performance/result_summary.json``, ``accuracy/accuracy_results.json`` and
``audit/`` (:mod:`mlharness.submission.endpoints`), measurements.json and README.md as above.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mlharness.compliance import verify
from mlharness.errors import ConfigError
from mlharness.rules import endpoints as endpoints_format
from mlharness.rules.loader import DEFAULT_ROUND
from mlharness.rules.model import BenchmarkRules, Rules
from mlharness.submission import documents
from mlharness.submission import endpoints as endpoints_result
from mlharness.submission.check import llm_audit_problems
from mlharness.files import write_json_atomic, write_text_atomic
from mlharness.submission.files import copy_file
from mlharness.submission.runs import Inventory, Run, Verification
from mlharness.submission.truncate import truncate_dir

#: what ``submit --format`` asks: each benchmark in its reference's format (``auto``), LoadGen's
#: logs for all, or the endpoints format wherever the checker accepts it
Format = Literal["auto", "loadgen", "endpoints"]
FORMATS: tuple[str, ...] = ("auto", "loadgen", "endpoints")
PERF_FILES = ("mlperf_log_summary.txt", "mlperf_log_detail.txt")
ACC_FILES = ("mlperf_log_summary.txt", "mlperf_log_detail.txt", "mlperf_log_accuracy.json",
             "accuracy.txt")


@dataclass
class Entry:
    """One laid-out result."""

    benchmark: str  # mlharness name
    bench_dir: str  # submission directory name
    scenario: str
    path: Path  # the scenario directory in the tree
    performance: Run
    accuracy: Run
    tests: list[str] = field(default_factory=list)
    verdicts: dict[str, bool] = field(default_factory=dict)  # tests verified by submit itself
    why: dict[str, str] = field(default_factory=dict)  # mode -> why that run was chosen
    compliance_path: Path | None = None  # where TEST0X/ live (the scenario directory in v6)
    measurements_file: Path | None = None  # measurements.json (v4: <system>_<impl>_<scenario>.json)
    format: str = "loadgen"  # the result's files: LoadGen's logs or the endpoints format

    def to_dict(self) -> dict[str, Any]:
        return {"benchmark": self.benchmark, "bench_dir": self.bench_dir,
                "scenario": self.scenario, "path": str(self.path),
                "performance_run": str(self.performance.path),
                "accuracy_run": str(self.accuracy.path), "tests": self.tests,
                "short": self.performance.short, "why": self.why, "format": self.format}


@dataclass
class Layout:
    root: Path
    division: str
    submitter: str
    system: str
    entries: list[Entry] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def base(self) -> Path:
        return self.root / self.division / self.submitter


def _copy_set(src: Path, dst: Path, names: tuple[str, ...]) -> list[str]:
    missing = [n for n in names if not (src / n).is_file()]
    if not missing:
        for name in names:
            copy_file(src / name, dst / name)
    return missing


def _copy_verification(v: Verification, dst: Path) -> None:
    """Copy the official-shaped TEST0X output; only the files the checker reads or allows."""
    for name in ("verify_accuracy.txt", "verify_performance.txt", "verify_output_len.txt"):
        if (v.path / name).is_file():
            copy_file(v.path / name, dst / name)
    for name in PERF_FILES:
        src = v.path / "performance" / "run_1" / name
        if src.is_file():
            copy_file(src, dst / "performance" / "run_1" / name)
    acc = v.path / "accuracy"
    if (acc / "mlperf_log_accuracy.json").is_file():
        copy_file(acc / "mlperf_log_accuracy.json", dst / "accuracy" / "mlperf_log_accuracy.json")
        # truncate_accuracy_log.py needs an accuracy.txt here (an empty one is the convention)
        if (acc / "accuracy.txt").is_file():
            copy_file(acc / "accuracy.txt", dst / "accuracy" / "accuracy.txt")
        else:
            write_text_atomic(dst / "accuracy" / "accuracy.txt", "")
    for name in ("baseline_accuracy.txt", "compliance_accuracy.txt"):
        if (acc / name).is_file():
            copy_file(acc / name, dst / "accuracy" / name)


def _verify(test: str, perf: Run, acc: Run, audit: Run, scen_dir: Path) -> bool:
    """Verify the audit against exactly the runs laid out, on the untruncated accuracy log,
    writing ``scen_dir/<test>/`` as the official run_verification.py does."""
    verdict = verify(test, perf.path, acc.path if test == "TEST01" else None, audit.path,
                     scen_dir, overwrite=True)
    acc_dir = scen_dir / test / "accuracy"
    if (acc_dir / "mlperf_log_accuracy.json").is_file() and not (acc_dir / "accuracy.txt").is_file():
        write_text_atomic(acc_dir / "accuracy.txt", "")  # truncate_accuracy_log.py needs one
    return bool(verdict.passed)


def result_format(bench: Any, requested: str, rules: Rules) -> str:
    """``loadgen`` or ``endpoints``: the files of one benchmark's results. ``endpoints`` only
    for a benchmark the round's checker accepts in it (``ENDPOINTS_ALLOWED_MODELS``); with
    ``auto``, only where the reference writes it (qwen3-vl)."""
    if requested == "loadgen" or not isinstance(bench, BenchmarkRules) or \
            rules.round not in endpoints_format.ROUNDS:
        return "loadgen"
    if not endpoints_format.load(rules.round).allows(bench.name):
        return "loadgen"
    if requested == "auto" and bench.reference_format != "endpoints":
        return "loadgen"
    return "endpoints"


def _fix_run(benchmark: str, scenario: str, mode: str) -> str:
    return f"mlharness run --benchmark {benchmark} --scenario {scenario} --mode {mode} --valid ..."


def lay_out(
    inventory: Inventory,
    rules: Rules,
    root: Path,
    division: str,
    submitter: str,
    system: str,
    system_desc: dict[str, str],
    requested_format: str = "auto",
) -> Layout:
    """Copy the chosen runs (``Inventory.choose``) into the tree under ``root`` (which must be empty),
    then truncate the accuracy logs. Runs that cannot be laid out are listed in ``notes``;
    ``requested_format``: :data:`FORMATS` (:func:`result_format` decides per benchmark)."""
    if rules.layout not in ("v6", "v4"):
        raise ConfigError(f"mlharness lays out v6.x trees and those of rounds before v5.0; "
                          f"{rules.round}'s layout is not implemented",
                          hint=f"use --round {DEFAULT_ROUND} (the official "
                               "preprocess_submission.py converts old trees)")
    old = rules.layout == "v4"
    if division not in rules.divisions:
        raise ConfigError(f"unknown division {division!r}", hint="use open, closed or network")
    out = Layout(root, division, submitter, system)
    by_bench: dict[str, list[Run]] = {}
    refused: dict[str, ConfigError] = {}  # benchmarks that cannot count for the round: said once
    for benchmark, scenario in inventory.keys():
        bench = rules.find(benchmark)
        if bench is None:
            try:
                rules.benchmark(benchmark)
            except ConfigError as exc:
                if benchmark not in refused:
                    refused[benchmark] = exc
                    out.notes.append(f"skipped {benchmark}: {exc.message}")
            continue
        perf_choice = inventory.choose(benchmark, scenario, "performance")
        acc_choice = inventory.choose(benchmark, scenario, "accuracy")
        assert perf_choice is not None
        perf, acc = perf_choice.run, acc_choice.run if acc_choice else None
        if acc is None:
            out.notes.append(f"skipped {benchmark} {scenario}: no successful accuracy run; run "
                             f"`{_fix_run(benchmark, scenario, 'accuracy')}`")
            continue
        if not (acc.path / "accuracy.txt").is_file():
            out.notes.append(f"skipped {benchmark} {scenario}: {acc.path} has no accuracy.txt")
            continue
        scen_dir = out.base / "results" / system / bench.name / scenario
        meas_dir, comp_dir = scen_dir, scen_dir
        if old:
            meas_dir = out.base / "measurements" / system / bench.name / scenario
            comp_dir = out.base / "compliance" / system / bench.name / scenario
        fmt = "loadgen" if old else result_format(bench, requested_format, rules)
        if requested_format == "endpoints" and fmt == "loadgen" and not old and \
                f"{bench.name} loadgen" not in " ".join(out.notes):
            out.notes.append(f"{bench.name} loadgen: laid out in LoadGen's format (the "
                             f"{rules.round} checker accepts the endpoints format only for "
                             + ", ".join(endpoints_format.load(rules.round).allowed_models)
                             + ")" if rules.round in endpoints_format.ROUNDS else
                             f"{bench.name} loadgen: {rules.round} has no endpoints format")
        if fmt == "endpoints":
            entry = Entry(benchmark, bench.name, scenario, scen_dir, perf, acc,
                          why={"performance": perf_choice.why,
                               "accuracy": acc_choice.why if acc_choice else ""},
                          compliance_path=scen_dir / "loadgen", format="endpoints")
            audits = _audits(entry, bench, inventory, division, out)
            entry.tests = endpoints_result.write(scen_dir, bench, scenario, perf, acc, audits)
            _finish_entry(entry, bench, rules, meas_dir, old, system)
            out.entries.append(entry)
            by_bench.setdefault(bench.name, []).extend([perf, acc])
            continue
        if (perf.record.power or {}).get("metric") is not None:
            # lazy: power.session (it imports the runner; ~60 modules) stays out of `mlharness --help`
            from mlharness.power.session import SESSION_FILES

            missing = [f"{d}/{n}" for d, names in SESSION_FILES.items()
                       for n in _copy_set(perf.path / d, scen_dir / "performance" / d, names)]
        else:
            missing = _copy_set(perf.path, scen_dir / "performance" / "run_1", PERF_FILES)
        missing += _copy_set(acc.path, scen_dir / "accuracy", ACC_FILES)
        if missing:
            out.notes.append(f"skipped {benchmark} {scenario}: missing {', '.join(missing)}")
            continue
        user_conf = perf.path / "user.conf"
        if user_conf.is_file():
            copy_file(user_conf, meas_dir / "user.conf")
        entry = Entry(benchmark, bench.name, scenario, scen_dir, perf, acc,
                      why={"performance": perf_choice.why,
                           "accuracy": acc_choice.why if acc_choice else ""},
                      compliance_path=comp_dir)
        for test in bench.compliance_tests if division != "open" else ():
            audit = inventory.audit(test, benchmark, scenario)
            found = inventory.verification(test, benchmark, scenario)
            if audit is not None:
                entry.verdicts[test] = _verify(test, perf, acc, audit, comp_dir)
                entry.tests.append(test)
            elif found is not None:
                _copy_verification(found, comp_dir / test)
                entry.tests.append(test)
            else:
                out.notes.append(
                    f"{benchmark} {scenario}: no {test} verification found; run "
                    f"`mlharness compliance --audit {test} --benchmark {benchmark} --scenario {scenario} ...`")
        _finish_entry(entry, bench, rules, meas_dir, old, system)
        out.entries.append(entry)
        by_bench.setdefault(bench.name, []).extend([perf, acc])
    if not out.entries:
        if refused and len(out.notes) == len(refused):  # only runs that can never count
            raise ConfigError("nothing to lay out: " + "; ".join(e.message for e in refused.values()),
                              hint=next(iter(refused.values())).hint)
        raise ConfigError("nothing to lay out: " + ("; ".join(out.notes) or "no successful runs found"),
                          hint="each reason above names the run to make" if out.notes else
                          "run performance and accuracy tests first (`mlharness run ...`)")
    desc = dict(system_desc, system_name=system_desc.get("system_name") or system,
                division=division, submitter=submitter)
    write_json_atomic(out.base / "systems" / f"{system}.json", desc)
    src_rows = []
    for bench_dir, runs in sorted(by_bench.items()):
        if old:  # code/<benchmark>/<impl>/ per implementation (check_measurement_dir's code_dir)
            for impl in sorted({_impl(r) for r in runs}):
                write_text_atomic(out.base / "code" / bench_dir / impl / "settings.json",
                                  documents.src_settings([r for r in runs if _impl(r) == impl]))
        else:
            write_text_atomic(out.base / "src" / bench_dir / "settings.json",
                              documents.src_settings(runs))
        for run in runs:
            src_rows.append({"benchmark": bench_dir, "scenario": run.scenario, "mode": run.mode,
                             "backend": run.spec.backend,
                             "model": Path(str(run.spec.model or "")).name})
    write_text_atomic(out.base / ("code" if old else "src") / "README.md",
                      documents.src_readme(src_rows))
    truncate_tree(out)
    return out


def _finish_entry(entry: Entry, bench: Any, rules: Rules, meas_dir: Path, old: bool,
                  system: str) -> None:
    """measurements.json (or the older layout's file), README.md and, where the round wants
    it, mlperf.conf of one laid-out result."""
    perf, acc = entry.performance, entry.accuracy
    name = f"{system}_{_impl(perf)}_{entry.scenario}.json" if old else "measurements.json"
    entry.measurements_file = meas_dir / name
    write_json_atomic(entry.measurements_file, documents.measurements(perf, acc))
    write_text_atomic(meas_dir / "README.md",
                      documents.result_readme(bench.name, perf, acc, entry.tests))
    if "mlperf.conf" in rules.measurements_files:
        write_text_atomic(meas_dir / "mlperf.conf",
                          documents.mlperf_conf(rules, bench.loadgen_model))


def _audits(entry: Entry, bench: BenchmarkRules, inventory: Inventory, division: str,
            out: Layout) -> dict[str, bool]:
    """The verdict of each audit of an endpoints-format result: an audit run verified against
    the laid-out runs (its official-shaped output kept under ``loadgen/``), or a verification
    made earlier, judged as ``check`` judges it."""
    verdicts: dict[str, bool] = {}
    for test in bench.compliance_tests if division != "open" else ():
        audit = inventory.audit(test, entry.benchmark, entry.scenario)
        found = inventory.verification(test, entry.benchmark, entry.scenario)
        assert entry.compliance_path is not None
        if audit is not None:
            verdicts[test] = _verify(test, entry.performance, entry.accuracy, audit,
                                     entry.compliance_path)
        elif found is not None:
            _copy_verification(found, entry.compliance_path / test)
            verdicts[test] = not llm_audit_problems(entry.compliance_path / test, test, test, "")
        else:
            out.notes.append(f"{entry.benchmark} {entry.scenario}: no {test} verification found "
                             "(optional in the endpoints format); run `mlharness compliance "
                             f"--audit {test} --benchmark {entry.benchmark} --scenario "
                             f"{entry.scenario} ...`")
    return verdicts


def _impl(run: Run) -> str:
    """The implementation name of the older layout's ``<system>_<impl>_<scenario>.json``."""
    return str(run.spec.backend).replace("_", "-")


def truncate_tree(layout: Layout) -> None:
    """Truncate every accuracy log in the tree (after compliance verification, as the rules say)."""
    for entry in layout.entries:
        if entry.format == "endpoints":  # no accuracy log in the tree: its score only
            continue
        truncate_dir(entry.path / "accuracy")
        test01 = (entry.compliance_path or entry.path) / "TEST01" / "accuracy"
        if (test01 / "mlperf_log_accuracy.json").is_file():
            truncate_dir(test01)
