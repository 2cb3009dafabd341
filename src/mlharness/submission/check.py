"""Our own submission checker: the official checker's rules (``submission_checker/checks/*.py``)
over the same round tables, with every problem said in plain words and the command that fixes it.

Where the official checker has quirks we check the intent instead: an INVALID performance result
or LoadGen errors in a performance log are problems here even though the modular checker lets
them pass (see MLPERF_FACTS §4.2), and an Interactive result's TTFT/TPOT are held to the
Interactive limits (the checker looks them up under the scenario in LoadGen's log, Server).

Every benchmark, whatever its kind, is one ``BenchmarkRules`` of the round: its scenarios
(required, optional; one of Interactive or Server), its token latencies where it uses them,
every accuracy metric with its upper limit, and its compliance tests (TEST01/04, TEST06/07/09).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlharness.errors import ConfigError
from mlharness.loadgen.mllog import MLLOG_PREFIX, DetailLog, parse_detail_log
from mlharness.names import Scenario
from mlharness.rules import endpoints
from mlharness.rules.loader import DEFAULT_ROUND
from mlharness.rules.model import BenchmarkRules, Rules
from mlharness.rules.preflight import round_for_seeds
from mlharness.rules.problems import Problem
from mlharness.submission import check_endpoints
from mlharness.submission import system as system_desc
from mlharness.submission.pack import unsafe_members

EARLY_STOPPING = ("SingleStream", "MultiStream", "Server")
TEST_RUN_FIX = ("re-run it full length: `mlharness run --benchmark {b} --scenario {s} "
                "--mode performance --valid ...`, then `mlharness submit ... --force`")
RESUBMIT = "re-run `mlharness submit ... --force` to lay the tree out again"
#: the p99 token latencies the checker's ``llm_check`` reads (ns)
TTFT_P99 = "result_first_token_99.00_percentile_latency_ns"
TPOT_P99 = "result_time_per_output_token_99.00_percentile_ns"


def _dirs(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_dir()) if path.is_dir() else []


def _read_log(path: Path, where: str, out: list[Problem]) -> DetailLog | None:
    if not path.is_file():
        out.append(Problem("log-missing", f"{path.name} is missing", where=where,
                           meaning="the checker needs LoadGen's detail log here", fix=RESUBMIT))
        return None
    first = path.read_text(errors="replace").split("\n", 1)[0]
    if not first.startswith(MLLOG_PREFIX):
        out.append(Problem("log-malformed", f"{path.name} does not start with {MLLOG_PREFIX}",
                           where=where, meaning="the checker refuses logs that are not LoadGen's",
                           fix="copy the log exactly as LoadGen wrote it"))
        return None
    log = parse_detail_log(path)
    if any("unreadable MLLOG line" in w for w in log.warnings):
        out.append(Problem("log-malformed", f"{path.name} has an unreadable :::MLLOG line",
                           where=where, meaning="the checker stops at malformed lines",
                           fix="the run was cut off; run it again"))
    return log


def _num(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


#: the network division's runs must log a sut_name containing this
#: (``NETWORK_MODE_REQUIRED_SUBSTRING_IN_SUT_NAME`` in the checker's constants.py)
NETWORK_SUT_NAME = "Network SUT"


def _truthy(v: Any) -> bool:
    return v is True or str(v).lower() == "true"


def performance_problems(log: DetailLog, bench: BenchmarkRules, rules: Rules, division: str,
                         where: str, seeds: dict[str, int] | None = None,
                         directory: str | None = None) -> list[Problem]:
    """``checks/performance_check.py`` plus validity and LoadGen errors. ``seeds``: the ones
    expected (default the round's; a TEST05 audit's are the round's TEST05 seeds);
    ``directory``: the result's scenario directory (Interactive, where LoadGen logs Server)."""
    v = log.values
    out: list[Problem] = []
    scenario = str(v.get("effective_scenario", ""))
    fix_run = TEST_RUN_FIX.format(b=bench.harness, s=directory or scenario)
    duration = _num(v.get("effective_min_duration_ms"))
    if not duration >= rules.min_duration_ms:
        test = duration < 60000
        out.append(Problem(
            "test-duration" if test else "min-duration",
            (f"a --test run (min_duration {duration:g} ms): not valid for submission because it "
             f"is shorter than {rules.min_duration_ms // 1000} s") if test else
            f"min_duration {duration:g} ms is below the required {rules.min_duration_ms} ms",
            meaning="the rules need every performance run to last at least 600 s", fix=fix_run,
            where=where))
    for key, expected in (seeds or rules.seeds).items():
        found = v.get(f"effective_{key}")
        if found is None or int(found) != expected:
            out.append(Problem(
                "wrong-seeds", f"{key} is {found}, {rules.round} expects {expected}", where=where,
                meaning="seeds come from the mlperf.conf compiled into LoadGen (or from --round); "
                "these logs were made with another round's seeds",
                fix=f"check with the matching --round, or re-run with --round {rules.round}"))
    psc = _num(v.get("effective_performance_sample_count"))
    if not psc >= bench.performance_sample_count:
        own_set = bench.reference_format == "endpoints" \
            and directory in bench.accuracy_sample_count_by_scenario
        out.append(Problem(
            "performance-sample-count",
            f"performance_sample_count {psc:g} < {bench.performance_sample_count}", where=where,
            meaning="LoadGen must choose among at least this many samples held in memory"
            + (f" (in LoadGen's format; {directory}'s own set is smaller)" if own_set else ""),
            fix="lay the result out in the endpoints format, which has no such count: "
            "`mlharness submit ... --format auto --force`" if own_set else
            "drop --performance-sample-count and use a dataset with enough samples"))
    if v.get("result_validity") != "VALID":
        out.append(Problem(
            "result-invalid", f"LoadGen marked the result {v.get('result_validity', 'missing')}",
            where=where, meaning="only VALID results count (min duration, queries, early stopping "
            "or latency were not met)", fix=fix_run))
    if log.errors:
        out.append(Problem("loadgen-errors", f"LoadGen logged {len(log.errors)} error(s): {log.errors[0]}",
                           where=where, meaning="a log with LoadGen errors cannot be submitted",
                           fix=fix_run))
    if scenario in EARLY_STOPPING and not _truthy(v.get("early_stopping_met")):
        out.append(Problem("early-stopping", "early stopping condition not met", where=where,
                           meaning="too few queries for a latency estimate with 99% confidence",
                           fix=fix_run))
    if scenario == "Server" and bench.server_latency_ns:
        target = _num(v.get("effective_target_latency_ns"))
        if target > bench.server_latency_ns:
            out.append(Problem("server-latency", f"target latency {target:g} ns > "
                               f"{bench.server_latency_ns} ns allowed", where=where,
                               meaning="the Server latency bound is fixed by the round",
                               fix="drop --server-latency and re-run"))
    if division == "network" and NETWORK_SUT_NAME not in str(v.get("sut_name", "")):
        out.append(Problem("network-sut-name", f"sut_name {v.get('sut_name')!r} lacks "
                           f"{NETWORK_SUT_NAME!r}", where=where,
                           meaning="a network-division run must come from LoadGen over the "
                           "network, whose SUT name says so",
                           fix=f"re-run with --backend remote --endpoint URL ({fix_run})"))
    if scenario == "Offline" and division == "closed":
        spq = _num(v.get("effective_samples_per_query"))
        if not spq >= bench.offline_min_samples_per_query:
            out.append(Problem("offline-samples-per-query", f"Offline issued {spq:g} samples, "
                               f"closed needs >= {bench.offline_min_samples_per_query}", where=where,
                               meaning="closed Offline runs must issue the round's minimum",
                               fix=fix_run))
    if bench.uses_token_latencies:
        out += token_problems(log, bench, directory or scenario, where, fix_run)
    elif bench.generates and scenario == "Server":
        # judged on the end-to-end latency: Interactive's own bound, which LoadGen's log (Server)
        # does not name and the checker does not apply (it looks the bound up under Server)
        limit = bench.latency_limit(directory or scenario)
        target = _num(v.get("effective_target_latency_ns"))
        if limit is not None and target > limit and limit != bench.server_latency_ns:
            out.append(Problem("server-latency", f"target latency {target:g} ns > {limit} ns "
                               f"allowed in {directory}", where=where,
                               meaning=f"the {directory} latency bound is fixed by the round",
                               fix="drop --server-latency and re-run"))
    return out


def token_problems(log: DetailLog, bench: BenchmarkRules, scenario: str, where: str,
                   fix: str) -> list[Problem]:
    """``llm_check`` of ``checks/performance_check.py``: token latencies logged and, in Server
    and Interactive, TTFT and TPOT p99 strictly below ``scenario``'s limits (``TokenLimit``)."""
    v = log.values
    if not _truthy(v.get("requested_use_token_latencies")):
        return [Problem("token-latencies-off", "use_token_latencies is not enabled", where=where,
                        meaning=f"{bench.name} is judged on tokens: LoadGen must time the first "
                        "token and each output token", fix=fix)]
    limit = bench.token_limit(scenario)
    if limit is None:  # Offline, SingleStream: throughput or latency, no token bounds
        return []
    ttft, tpot = _num(v.get(TTFT_P99)), _num(v.get(TPOT_P99))
    if ttft != ttft or tpot != tpot:  # NaN: not logged
        return [Problem("token-latencies-missing", "the log has no TTFT or TPOT p99", where=where,
                        meaning="LoadGen writes them for a run with token latencies; the log "
                        "is not a complete token run", fix=fix)]
    if limit.passes(ttft, tpot):
        return []
    return [Problem(
        "token-latency", f"{scenario} TTFT p99 {ttft / 1e6:.1f} ms (limit {limit.ttft_ns / 1e6:g}"
        f" ms), TPOT p99 {tpot / 1e6:.2f} ms (limit {limit.tpot_ns / 1e6:g} ms): not both below",
        where=where, meaning=f"{bench.name} {scenario} results must keep both p99 token "
        "latencies strictly below the round's limits",
        fix="lower --target-qps (fewer concurrent streams) until both are below, then re-run")]


def accuracy_value_problems(text: str, bench: BenchmarkRules, division: str, where: str,
                            fix: str, scenario: str | None = None) -> list[Problem]:
    """``accuracy_result_check``: every target metric read from accuracy.txt with the checker's
    patterns; in closed, each reaching its target (``scenario``'s own where the round gives it
    one: qwen3-vl's Interactive) and none reported above its upper limit
    (``BenchmarkRules.accuracy_failures``)."""
    values = bench.parse_accuracy(text)
    targets = [b.metric for b in (bench.accuracy_for(scenario) if scenario else bench.accuracy)]
    missing = [m for m in targets if m not in values]
    if missing:
        return [Problem("accuracy-unreadable", "accuracy.txt has no " + ", ".join(missing),
                        where=where, meaning=f"{bench.name} is judged on " + ", ".join(targets)
                        + ", each read with the checker's fixed pattern", fix=fix)]
    failures = bench.accuracy_failures(values, scenario) if division != "open" else []
    if not failures:
        return []
    meaning = ("closed results must reach every accuracy target of the round and stay within "
               "its upper limits")
    if any(f.startswith("GEN_LEN ") for f in failures):
        meaning += " (GEN_LEN is the characters of all outputs together: a sum over the full set)"
    return [Problem("accuracy-below-target", "; ".join(failures), where=where, meaning=meaning,
                    fix="improve the model or submit in the open division")]


def accuracy_problems(acc_dir: Path, bench: BenchmarkRules, rules: Rules, division: str,
                      where: str) -> list[Problem]:
    """``checks/accuracy_check.py``."""
    out: list[Problem] = []
    fix_acc = (f"`mlharness run --benchmark {bench.harness} --scenario {acc_dir.parent.name} "
               "--mode accuracy ...`, then submit again")
    missing = [n for n in ("mlperf_log_summary.txt", "mlperf_log_detail.txt", "accuracy.txt",
                           "mlperf_log_accuracy.json") if not (acc_dir / n).is_file()]
    if missing:
        return [Problem("accuracy-files", "missing " + ", ".join(missing), where=where,
                        meaning="every result needs its accuracy run", fix=fix_acc)]
    text = (acc_dir / "accuracy.txt").read_text(errors="replace")
    out += accuracy_value_problems(text, bench, division, where, fix_acc, acc_dir.parent.name)
    if not any(line.startswith("hash=") for line in text.splitlines()):
        out.append(Problem("accuracy-hash", "accuracy.txt has no hash= line", where=where,
                           meaning="the truncated accuracy log must carry the full log's sha256",
                           fix=RESUBMIT))
    if (acc_dir / "mlperf_log_accuracy.json").stat().st_size > rules.max_accuracy_log_bytes:
        out.append(Problem("accuracy-not-truncated", "mlperf_log_accuracy.json is not truncated",
                           where=where, meaning="submissions carry only the first and last 4 KiB",
                           fix=RESUBMIT))
    log = _read_log(acc_dir / "mlperf_log_detail.txt", where, out)
    if log is None:
        return out
    if log.errors:
        out.append(Problem("loadgen-errors", f"accuracy log has LoadGen errors: {log.errors[0]}",
                           where=where, meaning="a log with LoadGen errors cannot be submitted",
                           fix=fix_acc))
    count = log.values.get("effective_accuracy_sample_count", log.values.get("qsl_reported_total_count"))
    expected = bench.accuracy_count_for(acc_dir.parent.name)
    if _num(count) != expected:
        out.append(Problem(
            "accuracy-coverage", f"the accuracy run covered {count} samples, the round's "
            f"accuracy set has {expected}", where=where,
            meaning="accuracy must be measured on the complete validation set (the official "
            "checker's --skip-dataset-size-check exists only for backwards compatibility)",
            fix=f"re-run accuracy on the full dataset: {fix_acc}"))
    return out


def measurement_problems(scen_dir: Path, rules: Rules, where: str,
                         system: str | None = None, endpoints: bool = False) -> list[Problem]:
    """``checks/measurements_checks.py``; with ``system`` (the older layout) the description is
    ``<system>_<impl>_<scenario>.json`` (``check_measurement_dir`` of the round's checker); an
    endpoints-format result needs no user.conf (``required_files_check``)."""
    out: list[Problem] = []
    path = scen_dir / "measurements.json"
    if system is not None:
        found = sorted(scen_dir.glob(f"{system}_*.json")) if scen_dir.is_dir() else []
        path = found[0] if found else scen_dir / f"{system}_<impl>_{scen_dir.name}.json"
    if not path.is_file():
        return [Problem("measurements-missing", f"{path.name} is missing", where=where,
                        meaning="each result describes its inputs and weights", fix=RESUBMIT)]
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        data = None
    if not isinstance(data, dict):
        return [Problem("measurements-malformed", "measurements.json is not a JSON object",
                        where=where, fix=RESUBMIT)]
    for key in rules.measurements_required:
        if not data.get(key):
            out.append(Problem("measurements-field", f"measurements.json field {key} is missing or "
                               "empty", where=where, meaning="the checker needs a non-empty value",
                               fix=f"edit {path}"))
    for name in rules.measurements_files:
        if endpoints and name == "user.conf":
            continue
        f = scen_dir / name
        if not f.is_file() or f.stat().st_size == 0:
            out.append(Problem("measurements-file", f"{name} is missing or empty", where=where,
                               meaning="user.conf and README.md must sit beside measurements.json",
                               fix=RESUBMIT))
    return out


#: the LLM audits: the verification file the checker reads, what it requires of it, and what a
#: failure means (``accuracy_check`` and ``dir_exists_check`` of ``checks/compliance_check.py``)
LLM_AUDITS = {
    "TEST06": ("verify_accuracy.txt", "the outputs of the audit run are not consistent (first "
               "token, a single EOS, n_tokens equal to the output length)"),
    "TEST07": ("verify_accuracy.txt", "accuracy in performance mode fell below the threshold"),
    "TEST09": ("verify_output_len.txt", "the mean output length is outside the audit's bounds"),
}
#: the lines of a passing TEST06 verify_accuracy.txt (compliance/TEST06/run_verification.py)
TEST06_PASS = (("First token check pass: True", "First token check pass: Skipped"),
               ("EOS check pass: True",), ("Sample length check pass: True",))


def llm_audit_problems(tdir: Path, test: str, where: str, fix: str) -> list[Problem]:
    """One LLM audit's verification file: TEST06's three checks passed, TEST07's and TEST09's
    ``TEST PASS`` (the checker reads nothing else of these audits)."""
    name, meaning = LLM_AUDITS[test]
    verify = tdir / name
    if not verify.is_file():
        return [Problem("compliance-files", f"{name} is missing", where=where, fix=fix)]
    text = verify.read_text(errors="replace")
    lines = [ln.strip() for ln in text.splitlines()]
    if test == "TEST06":
        failed = [alts[0].split(" pass:")[0] for alts in TEST06_PASS
                  if not any(a in lines for a in alts)]
    else:
        failed = [] if "TEST PASS" in text else ["TEST PASS"]
    if not failed:
        return []
    return [Problem("compliance-failed", f"{test} verification did not pass"
                    + (f" ({', '.join(failed)})" if test == "TEST06" else ""),
                    where=where, meaning=meaning, fix=fix)]


def compliance_problems(scen_dir: Path, bench: BenchmarkRules, rules: Rules, division: str,
                        where: str) -> list[Problem]:
    """``checks/compliance_check.py`` (closed and network only)."""
    out: list[Problem] = []
    for test in bench.compliance_tests:
        tdir = scen_dir / test
        fix = (f"`mlharness compliance --audit {test} --reference-perf PERF_RUN "
               + ("--reference-accuracy ACC_RUN " if test == "TEST01" else "")
               + "--output DIR` with the laid-out runs, then submit again")
        fix_audit = ("audits take the reference run's length: re-run performance with --valid, "
                     "then " + fix)
        w = f"{where}/{test}"
        if not tdir.is_dir():
            out.append(Problem("compliance-missing", f"{test} is missing", where=where,
                               meaning=f"closed {bench.name} needs the {test} audit", fix=fix))
            continue
        if test in LLM_AUDITS:
            out += llm_audit_problems(tdir, test, w, fix)
            continue
        if test == "TEST01":
            verify = tdir / "verify_accuracy.txt"
            if not verify.is_file():
                out.append(Problem("compliance-files", "verify_accuracy.txt is missing", where=w,
                                   fix=fix))
            elif "TEST PASS" not in [ln.strip() for ln in verify.read_text().splitlines()]:
                out.append(Problem("compliance-failed", "TEST01 accuracy verification did not pass",
                                   where=w, meaning="performance-mode responses differ from "
                                   "accuracy-mode responses", fix=fix))
        verify = tdir / "verify_performance.txt"
        if not verify.is_file():
            out.append(Problem("compliance-files", "verify_performance.txt is missing", where=w, fix=fix))
        elif "TEST PASS" not in verify.read_text():
            out.append(Problem("compliance-failed", f"{test} performance verification did not pass",
                               where=w, meaning=("the audit run was faster than allowed (caching?)"
                                                 if test == "TEST04" else
                                                 "with other seeds the performance changed beyond "
                                                 f"{rules.round}'s tolerance" if test == "TEST05"
                                                 else "the audit run's performance is out of band"),
                               fix=fix))
        run1 = tdir / "performance" / "run_1"
        files = {p.name for p in run1.iterdir() if p.is_file()} if run1.is_dir() else set()
        extra = files - {"mlperf_log_summary.txt", "mlperf_log_detail.txt",
                         "mlperf_log_accuracy.json", "mlperf_log_trace.json"}
        lacking = {"mlperf_log_summary.txt", "mlperf_log_detail.txt"} - files
        if extra or lacking:
            out.append(Problem("compliance-files", f"performance/run_1 file list mismatch "
                               f"(missing {sorted(lacking)}, extra {sorted(extra)})", where=w, fix=fix))
            continue
        log = _read_log(run1 / "mlperf_log_detail.txt", w, out)
        if log is not None:
            seeds = rules.test05_seeds if test == "TEST05" else None
            for p in performance_problems(log, bench, rules, division, w, seeds):
                if p.code == "loadgen-errors":  # the checker tolerates the audit's own notices
                    continue
                message = p.message.replace("a --test run", f"the {test} audit is a --test run")
                out.append(Problem(p.code, message, p.meaning, fix_audit, p.where))
    return out


def _model_mapping(base: Path) -> dict[str, str]:
    path = base / "model_mapping.json"
    if not path.is_file():
        return {}
    try:
        return dict(json.loads(path.read_text()))
    except (json.JSONDecodeError, TypeError, ValueError):
        return {}


ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")


def archives_beside(root: Path) -> list[Path]:
    """Archives lying in the submission root (``submit`` writes submission.tar.gz there)."""
    return sorted(p for p in root.iterdir()
                  if p.is_file() and p.name.endswith(ARCHIVE_SUFFIXES))


def archive_problems(archive: Path) -> list[Problem]:
    """A problem for every member of ``archive`` that could escape or alias on extraction,
    or one for an archive that cannot be read."""
    try:
        bad = unsafe_members(archive)
    except ConfigError as exc:
        return [Problem("archive-unreadable", exc.message, where=archive.name,
                        meaning="the archive is what gets uploaded; it must be a readable tar",
                        fix="mlharness submit ... --force (re-packs the tree)")]
    return [Problem("archive-unsafe-member", f"member {name!r} is {why}", where=archive.name,
                    meaning="extracting it could write outside the submission or alias "
                            "another file; the official tooling refuses such archives",
                    fix="re-pack with `mlharness submit` (it stores regular files only)")
            for name, why in bad]


#: the seeds a detail log records, by the rules' seed names
_LOGGED_SEEDS = ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed")


def tree_round(root: Path) -> str | None:
    """The round a submission tree was made for, read from the seeds its first performance log
    records (``effective_*_rng_seed``); None when no log names a known round's seeds."""
    for detail in sorted(root.glob("*/*/results/*/*/*/performance/run_1/mlperf_log_detail.txt")):
        try:
            values = parse_detail_log(detail).values
            seeds = {k: int(values[f"effective_{k}"]) for k in _LOGGED_SEEDS}
        except (OSError, ValueError, KeyError, TypeError):
            continue
        return round_for_seeds(seeds)
    return None


def check_tree(root: Path, rules: Rules) -> list[Problem]:
    """Every problem in the submission tree at ``root``."""
    out: list[Problem] = []
    if rules.layout not in ("v6", "v4"):
        return [Problem("layout-unsupported", f"{rules.round} trees use a layout mlharness does "
                        "not check", meaning="mlharness checks v6.x trees and those of rounds "
                        "before v5.0", fix=f"check with --round {DEFAULT_ROUND}", where=str(root))]
    divisions = [d for d in _dirs(root) if d.name in rules.divisions]
    if not divisions:
        return [Problem("tree-empty", f"no {'/'.join(rules.divisions)} directory in {root}",
                        meaning="a submission root holds division directories",
                        fix="mlharness submit --submitter ORG --division open --system NAME "
                        "--runs runs/ --output submission/", where=str(root))]
    for div in divisions:
        if not _dirs(div):
            out.append(Problem("division-empty", f"{div.name}/ holds no submitter: nothing to check",
                               meaning=f"a division directory holds <submitter>/results/... ; an "
                               f"empty {div.name}/ is not a submission",
                               fix="mlharness submit --submitter ORG --division open --system NAME "
                               "--runs runs/ --output submission/", where=div.name))
        for sub in _dirs(div):
            out += _check_submitter(root, div.name, sub, rules)
    return out


def _check_submitter(root: Path, division: str, sub: Path, rules: Rules) -> list[Problem]:
    out: list[Problem] = []
    rel = lambda p: str(p.relative_to(root))  # noqa: E731
    code = "code" if rules.layout == "v4" else "src"
    if not (sub / code).is_dir():
        out.append(Problem("src-missing", f"{code}/ does not exist", where=rel(sub),
                           meaning="the code that produced the results must be included",
                           fix=RESUBMIT))
    mapping = _model_mapping(sub) if division == "open" else {}
    results = sub / "results"
    if not _dirs(results):
        out.append(Problem("no-results", "results/ holds no system", where=rel(sub), fix=RESUBMIT))
    for sys_dir in _dirs(results):
        sys_json = sub / "systems" / f"{sys_dir.name}.json"
        desc: dict[str, Any] | None = {}
        if not sys_json.is_file():
            out.append(Problem("system-json-missing", f"systems/{sys_dir.name}.json is missing",
                               where=rel(sub), meaning="every system in results/ needs a description",
                               fix=f"mlharness system detect --name {sys_dir.name} --output systems/"))
        else:
            try:
                desc = json.loads(sys_json.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                desc = None
            if isinstance(desc, dict):
                out += system_desc.problems(desc, rules, division, sub.name, where=rel(sys_json))
            else:
                desc = {}
                out.append(Problem("system-json-malformed", "not a JSON object",
                                   where=rel(sys_json), meaning="the checker reads it as JSON",
                                   fix=f"mlharness system detect --name {sys_dir.name} "
                                       "--output systems/ --force"))
        if not _dirs(sys_dir):
            out.append(Problem("no-results", f"results/{sys_dir.name}/ holds no benchmark: "
                               "nothing to check", where=rel(sub), fix=RESUBMIT))
        for bench_dir in _dirs(sys_dir):
            name = mapping.get(bench_dir.name, bench_dir.name)
            bench = rules.find(name)
            if bench is None:
                reason = ("is retired in " + rules.round) if name in rules.retired_benchmarks else \
                    f"is not a {rules.round} benchmark"
                out.append(Problem("benchmark-unknown", f"{bench_dir.name} {reason}",
                                   where=rel(bench_dir),
                                   meaning="directory names must be the round's benchmark names "
                                   "(resnet, bert-99, bert-99.9)",
                                   fix="lay the tree out with `mlharness submit` for this round"))
                continue
            scenarios = [d.name for d in _dirs(bench_dir)]
            if division in ("closed", "network") and desc:
                out += _scenario_problems(bench, rules, str(desc.get("system_type", "")),
                                          scenarios, rel(bench_dir))
            for scen_dir in _dirs(bench_dir):
                out += _check_scenario(root, scen_dir, bench, rules, division)
    return out


def _scenario_problems(bench: BenchmarkRules, rules: Rules, system_type: str,
                       scenarios: list[str], where: str) -> list[Problem]:
    """``check_scenarios`` of the checker's loader.py: the required scenarios, one of
    Interactive or Server where both are optional, and (today's checker; the older rounds'
    own checkers do not look) nothing beyond required and optional."""
    found = bench.scenario_problems(system_type, scenarios)
    if found is None:
        suites = " or ".join(f'"{t}"' for t in bench.required_scenarios) or "another"
        return [Problem("system-type-unsupported", f"{rules.round} lists no required scenarios "
                        f"for {bench.name} on a {system_type} system", where=where,
                        meaning="the official checker cannot judge it (it crashes)",
                        fix=f"declare system_type {suites} (a suite that holds "
                        f"{bench.name}) in the system TOML")]
    missing, unknown = found
    out = []
    needs = [*(bench.scenarios_for(system_type) or ()),
             *(m.removeprefix("(").replace(") ", " ") for m in missing if m.startswith("("))]
    if missing:
        out.append(Problem("scenarios-missing", "missing scenarios " + ", ".join(missing),
                           where=where, meaning=f"closed {system_type} {bench.name} needs "
                           + ", ".join(needs),
                           fix=f"run {bench.harness} in those scenarios (performance and "
                           "accuracy), then submit again"))
    if unknown and not rules.checker_script:
        out.append(Problem("scenarios-unknown", "scenarios the suite does not have: "
                           + ", ".join(unknown), where=where,
                           meaning=f"a closed {system_type} {bench.name} result holds only its "
                           "required and optional scenarios", fix="remove those directories"))
    return out


def _check_endpoints(scen_dir: Path, bench: BenchmarkRules, rules: Rules, division: str,
                     where: str) -> list[Problem]:
    """A scenario directory in the endpoints format (``check_endpoints``)."""
    facts = endpoints.load(rules.round)
    out = check_endpoints.performance_problems(scen_dir, bench, rules, division, where, facts)
    out += check_endpoints.accuracy_problems(scen_dir, bench, rules, division, where, facts)
    out += measurement_problems(scen_dir, rules, where, endpoints=True)
    if division in ("closed", "network"):
        out += check_endpoints.compliance_problems(scen_dir, bench, facts, where)
    return out


def _check_scenario(root: Path, scen_dir: Path, bench: BenchmarkRules, rules: Rules,
                    division: str) -> list[Problem]:
    where = str(scen_dir.relative_to(root))
    out: list[Problem] = []
    known = (*rules.scenarios, Scenario.INTERACTIVE.value) \
        if bench.interactive_loadgen_model is not None else rules.scenarios
    if scen_dir.name not in known:
        return [Problem("scenario-unknown", f"{scen_dir.name} is not a scenario", where=where,
                        fix="remove the directory")]
    if rules.layout == "v6" and bench.generates and \
            rules.round in endpoints.ROUNDS and endpoints.is_endpoints_dir(scen_dir):
        return _check_endpoints(scen_dir, bench, rules, division, where)
    log = _read_log(scen_dir / "performance" / "run_1" / "mlperf_log_detail.txt", where, out)
    if log is not None:
        out += performance_problems(log, bench, rules, division, where,
                                    directory=scen_dir.name)
    out += accuracy_problems(scen_dir / "accuracy", bench, rules, division, where)
    meas_dir = comp_dir = scen_dir
    system = None
    if rules.layout == "v4":  # <sub>/results/<system>/<bench>/<scenario>
        sub, system = scen_dir.parents[3], scen_dir.parents[1].name
        tail = Path(system) / scen_dir.parent.name / scen_dir.name
        meas_dir, comp_dir = sub / "measurements" / tail, sub / "compliance" / tail
    out += measurement_problems(meas_dir, rules, where, system)
    if division in ("closed", "network"):
        out += compliance_problems(comp_dir, bench, rules, division, where)
    for retired in rules.retired_tests:
        if (scen_dir / retired).exists():
            out.append(Problem("compliance-retired", f"{retired} is retired", where=where,
                               meaning=f"{rules.round} has no {retired}; the checker ignores it",
                               fix=f"remove {retired}/ from the tree"))
    return out
