"""Submissions: system description, tree layout from run directories, accuracy-log truncation,
packing, summaries, and checking (ours and the official checker)."""

from __future__ import annotations

from collections import Counter
import json
from dataclasses import dataclass, field
from pathlib import Path

from mlharness.compliance import run_audit
from mlharness.compliance.audit_config import TESTS
from mlharness.errors import ConfigError
from mlharness.files import read_text_file
from mlharness.rules import DEFAULT_ROUND, Rules, load
from mlharness.rules.problems import Problem
from mlharness.submission import summary
from mlharness.submission.check import check_tree
from mlharness.submission.files import prepare_output, seal_output
from mlharness.submission.layout import FORMATS, Layout, lay_out
from mlharness.submission import pack as packing
from mlharness.submission.runs import Inventory, pin, scan
from mlharness.submission.system import (SYSTEM_TYPES, TYPE_DETAILS, check_name, describe, detect,
                                         load_user_toml, system_type_for)

__all__ = ["SubmitResult", "check_tree", "submit"]



@dataclass
class SubmitResult:
    layout: Layout
    summaries: dict[str, Path]
    archive: Path
    problems: list[Problem]
    skipped_links: list[Path] = field(default_factory=list)
    defaulted: list[str] = field(default_factory=list)
    replaced: str | None = None  # what --force deleted, if anything
    not_chosen: list[tuple[Path, str]] = field(default_factory=list)  # runs not used, and why
    derived: list[str] = field(default_factory=list)  # description fields derived, and why


def _guard_output(output: Path, runs: Path) -> None:
    out, src = output.resolve(), runs.resolve()
    if out == src or out in src.parents or out == Path.home() or out == Path(out.anchor):
        raise ConfigError(f"--output {output} would contain or replace the runs or your home",
                          hint="choose a new directory such as submission/")


def system_description(system: str, system_json: Path | None, system_toml: Path | None,
                       backend: str = "onnxruntime") -> tuple[dict[str, str], list[str]]:
    """From a JSON written by `mlharness system detect`, or detected now (+ the user's TOML);
    detected, the framework is ``backend``'s (the runtime the laid-out runs used)."""
    if system_json is not None:
        if not system_json.is_file():
            raise ConfigError(f"system JSON not found: {system_json}",
                              hint="write one with `mlharness system detect --name NAME --output systems/`")
        try:
            data = json.loads(read_text_file(system_json, "the system JSON"))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{system_json} is not JSON ({exc})", hint="re-run system detect") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{system_json} holds a JSON {type(data).__name__}, not an object",
                              hint="re-run `mlharness system detect`")
        return {k: str(v) for k, v in data.items()}, []
    user = load_user_toml(system_toml) if system_toml else None
    return describe(system, user, detect(backend))


def run_missing_audits(inventory: Inventory, rules: Rules, runs: Path) -> list[Path]:
    """Run each compliance audit a closed result lacks, with the settings of its performance run
    (audits take the reference run's length); returns the new audit run directories."""
    made = []
    for benchmark, scenario in inventory.keys():
        bench = rules.find(benchmark)
        perf = inventory.newest(benchmark, scenario, "performance")
        if bench is None or perf is None:
            continue
        for test in bench.compliance_tests:
            if test not in TESTS or test == "TEST07":  # TEST07 needs the GPQA compliance set
                continue  # (--test07-dataset): submit names it missing
            if inventory.audit(test, benchmark, scenario) is None:
                spec = perf.spec
                made.append(run_audit(test, spec, runs / "compliance" / test).run_dir)
    return made


def submit(runs: Path, output: Path, submitter: str, division: str, system: str,
           round: str = DEFAULT_ROUND, system_json: Path | None = None,
           system_toml: Path | None = None, force: bool = False,
           compliance: list[Path] | None = None, run_audits: bool = False,
           pinned: list[Path] | None = None, result_format: str = "auto") -> SubmitResult:
    """Lay out, truncate, summarise, pack and check. The runs are only read.

    ``pinned``: run directories chosen by hand (``--run``); they win over what ``runs`` holds
    for their benchmark x scenario x mode. ``runs`` may then be absent. ``result_format``:
    ``auto`` (each benchmark in its reference's format), ``loadgen`` or ``endpoints``
    (``layout.result_format``)."""
    rules = load(round)
    check_name("submitter", submitter)
    check_name("system", system)
    if division not in rules.divisions:
        raise ConfigError(f"unknown division {division!r}", hint="use open, closed or network")
    if result_format not in FORMATS:
        raise ConfigError(f"unknown result format {result_format!r}",
                          hint="use " + ", ".join(FORMATS))
    _guard_output(output, runs)
    for path in pinned or []:
        _guard_output(output, path)
    prepare_output(output, force, dry_run=True)  # refuse before any work

    def inventory_now() -> Inventory:
        inv = scan(runs, compliance) if runs.is_dir() or not pinned else Inventory()
        inv.round = rules.round  # a run made with another round's seeds is not a result here
        pin(inv, list(pinned or []))
        return inv

    inventory = inventory_now()
    if run_audits and division != "open":
        if run_missing_audits(inventory, rules, runs):
            inventory = inventory_now()
    if not inventory.keys():
        unused = inventory.not_chosen(set())
        reasons = "; ".join(f"{p.name}: {why}" for p, why in unused[:3])
        more = f" (and {len(unused) - 3} more)" if len(unused) > 3 else ""
        raise ConfigError(f"nothing to lay out: no usable performance run under {runs}"
                          + (f" ({len(unused)} not usable: {reasons}{more})" if unused else ""),
                          hint="run performance and accuracy tests first (`mlharness run ...`), "
                               "or pick runs with --run DIR")
    backends = Counter(r.spec.backend for r in inventory.runs if r.ok)
    desc, defaulted = system_description(system, system_json, system_toml,
                                         *(b for b, _ in backends.most_common(1)))
    derived: list[str] = []
    if "system_type" in defaulted:  # nobody said: the suite that holds the benchmarks
        derived = _derive_system_type(desc, defaulted, inventory, rules)
    replaced = prepare_output(output, force)
    try:
        layout = lay_out(inventory, rules, output, division, submitter, system, desc,
                         result_format)
        chosen = {r.path for e in layout.entries for r in (e.performance, e.accuracy)}
        not_chosen = inventory.not_chosen(chosen)
        paths = summary.write(layout, rules, output)
        archive = output / "submission.tar.gz"
        links = packing.pack(output, [division], archive)
    finally:  # the marker lists what was written, also when a step failed half way
        seal_output(output)
    problems = check_tree(output, rules)
    return SubmitResult(layout, paths, archive, problems, links, defaulted, replaced, not_chosen,
                        derived)


def _derive_system_type(desc: dict[str, str], defaulted: list[str], inventory: Inventory,
                        rules: Rules) -> list[str]:
    """Set ``desc``'s system type (and its detail) from the benchmarks laid out, when no system
    JSON or TOML gave one; the notes that say so (or that none fits)."""
    kinds: dict[str, list[str]] = {}
    for benchmark, _ in inventory.keys():
        bench = rules.find(benchmark)
        if bench is not None:
            kinds[bench.name] = [k for k in SYSTEM_TYPES if bench.scenarios_for(k) is not None]
    if not kinds:
        return []
    kind = system_type_for(kinds)
    if kind is None:
        names = ", ".join(f"{b} ({' or '.join(k) or 'none'})" for b, k in sorted(kinds.items()))
        return [f"system_type: no one suite holds every benchmark laid out ({names}); set "
                "system_type in --system-toml (or submit them as two systems)"]
    desc["system_type"] = kind
    defaulted.remove("system_type")
    if "system_type_detail" in defaulted:
        desc["system_type_detail"] = TYPE_DETAILS[kind]
        defaulted.remove("system_type_detail")
    only = sorted(b for b, k in kinds.items() if "edge" not in k) if kind != "edge" else []
    why = (f"{', '.join(only)} {'is' if len(only) == 1 else 'are'} judged only as datacenter"
           if only else "every benchmark laid out is in its suite")
    return [f"system_type {kind!r} derived from the benchmarks ({why}); set system_type in "
            "--system-toml to choose"]
