"""Run the official MLCommons submission checker from a checkout (never modified) and explain
each error it prints in plain words with the command that fixes it."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from mlharness.errors import ConfigError
from mlharness.rules.problems import Problem

RESUBMIT = "re-run `mlharness submit ... --force`"
#: (pattern in the checker's message, code, meaning, fix); error strings from checks/*.py
EXPLAIN: list[tuple[str, str, str, str]] = [
    (r"Test duration less(?:er)? than 600s", "test-duration",  # "lesser": checkers before v4.1
     "the performance run was shorter than 600 s (a --test run, or --min-duration lowered)",
     "re-run performance with --valid, then submit again"),
    (r"rng_seed is wrong", "wrong-seeds",
     "the logs were made with another round's LoadGen (seeds come from its mlperf.conf)",
     "check with the matching --version/--round, or re-run with the round's LoadGen"),
    (r"accurcy run does not cover all dataset|accuracy run does not cover", "accuracy-coverage",
     "the accuracy run did not cover the whole validation set",
     "run accuracy on the complete dataset (for synthetic practice data only, the checker's "
     "--skip-dataset-size-check exists)"),
    (r"performance_sample_count, found", "performance-sample-count",
     "fewer samples were loadable than the round requires (a --test LLM run loads a short "
     "sample set: 100 in Offline, 460 in Server and Interactive)",
     "use a dataset with at least that many samples, drop --performance-sample-count and run "
     "--valid"),
    (r"does not have all required scenarios", "scenarios-missing",
     "closed submissions need every required scenario of the suite",
     "run the missing scenarios (performance + accuracy) and submit again"),
    (r"Early stopping condition was not met", "early-stopping",
     "too few queries for a latency estimate", "run longer (--valid) or with a lower latency target"),
    (r"endpoints submission uses disallowed model", "endpoints-model",
     "a benchmark the round's checker does not accept in the endpoints format",
     "lay it out in LoadGen's format: `mlharness submit ... --format loadgen --force`"),
    (r"accuracy score not found|could not parse accuracy score", "accuracy-missing",
     "the endpoints result's accuracy/accuracy_results.json has no (numeric) score",
     "run accuracy, then `mlharness submit ... --force`"),
    (r"compliance test is incorrect|compliance test can not be loaded|is missing in .*audit",
     "compliance-files", "an endpoints audit record (audit/audit_<test>.json) is missing, of "
     "another test or failed", "run the audit with `mlharness compliance`, then submit again"),
    (r"Could not load json file|Yaml file not found", "endpoints-files",
     "an endpoints result's file is missing or unreadable (config.yaml, performance/"
     "result_summary.json, accuracy/accuracy_results.json)", RESUBMIT),
    (r"Latency constraint not met, expected", "latency",
     "the p99 end-to-end latency is over the scenario's bound",
     "lower --target-qps until the p99 is within it, then re-run"),
    (r"Latency constraint", "server-latency", "the Server latency bound was exceeded",
     "lower --target-qps until the run is VALID"),
    (r"Required minimum samples per query", "offline-samples-per-query",
     "closed Offline must issue the round's minimum samples", "drop --min-query-count; run --valid"),
    (r"accuracy not met", "accuracy-below-target", "accuracy is below the round's target",
     "use a more accurate model, or the open division"),
    (r"not hash value for accuracy.txt", "accuracy-hash",
     "accuracy.txt lacks the hash= line of the truncation", RESUBMIT),
    (r"is not truncated", "accuracy-not-truncated", "the accuracy log was not truncated", RESUBMIT),
    (r"has loadgen errors|contains errors", "loadgen-errors", "LoadGen logged errors in the run",
     "fix the cause shown in the log and re-run"),
    (r"field .* is missing|requires a meaningful response|invalid status|invalid system type|"
     r"has submitter|has division", "system-description",
     "the system description lacks or mislabels a field",
     "edit your system TOML and run `mlharness system detect --from ...`, then submit again"),
    (r"measurements json file not found|is missing user.conf|is missing README.md|is having empty|"
     r"missing meaningful value", "measurements", "measurements.json, user.conf or README.md is "
     "missing or empty", RESUBMIT),
    (r"src directory does not exist", "src-missing", "src/ is missing", RESUBMIT),
    (r"Missing TEST|Missing accuracy file|Missing perf|has no performance/run_1|file list mismatch",
     "compliance-files", "a compliance test's files are missing",
     "run `mlharness compliance --audit TEST0X ...` and submit again"),
    (r"Compliance test .* failed", "compliance-failed", "a compliance audit failed",
     "see TEST0X/verify_*.txt; fix the SUT (no caching, same outputs) and re-run the audit"),
    (r"TEST0[79] verify_\w+\.txt missing|Missing output length verification file",
     "compliance-files", "an LLM audit's verification file is missing",
     "run the audit (TEST06 for llama, TEST07/TEST09 for gpt-oss-120b) and submit again"),
    (r"TEST06 accuracy check failed|TEST07 accuracy check in .* failed|"
     r"TEST09 output length check in .* failed", "compliance-failed",
     "an LLM audit failed (TEST06: first token, EOS, token count; TEST07: accuracy in "
     "performance mode; TEST09: mean output length)",
     "see TEST0X/verify_*.txt; fix the SUT's outputs and re-run the audit"),
    (r"Failed extra check for TTFT and TPOT", "token-latency",
     "the p99 time to first token or time per output token is not below the round's limit. "
     "For a result in Interactive/ the 'Required' values it prints are the Server limits "
     "(llama3.1-8b: 2000 / 100 ms): the checker takes the scenario from LoadGen's log, and "
     "LoadGen runs Interactive as its Server scenario (the model key <model>-interactive), so "
     "the log says Server whatever the tree's layout; that is the checker's doing "
     "(checks/performance_check.py llm_check), not the layout's. An Interactive run VALID under "
     "its own limits (500 / 30 ms) is below the Server ones too; `mlharness check` holds it to "
     "the Interactive limits",
     "lower --target-qps until both are below, then re-run"),
    (r"use_token_latencies flag needs to be enabled", "token-latencies-off",
     "an LLM run must time tokens (use_token_latencies)",
     "run it with mlharness (the LLM benchmarks' mlperf.conf keys set it)"),
    (r"TTFT or TPOT percentile data missing|TTFT/TPOT latency limits missing",
     "token-latencies-missing", "the log lacks the token latencies the checker judges",
     "re-run the Server/Interactive performance test"),
    (r"has all unknown scenarios", "scenarios-unknown",
     "a scenario directory the benchmark's suite does not have",
     "remove that scenario directory and submit again"),
    (r"incorrect network mode", "system-network-mode", "is_network does not fit the division",
     "set is_network only for the network division"),
    (r"Power WG power_checker.py did not pass", "power-check",
     "power-dev's compliance/check.py rejected the power logs (its [ ] lines above say which check)",
     "run a real analyzer through SPEC PTDaemon 1.11.1 and the unchanged power client/server "
     "(docs/power.md), then `mlharness run --power ...` again"),
    (r"has no power samples falling in power range", "power-samples",
     "the analyzer log (spl.txt) has no sample inside LoadGen's power window",
     "check NTP sync of director and SUT, and that the run lasts longer than one sample"),
    (r"^\[ \] Check ", "power-check-item", "one of power-dev's compliance/check.py checks failed",
     "see docs/power.md (what a PTDaemon simulator cannot pass)"),
    (r"Running accuracy_check in ComplianceCheck", "checker-exception",
     "the checker raised reading an audit's verify_accuracy.txt: a TEST06 (or TEST01) "
     "directory or file is missing (named just before)",
     "run the audit and submit again; the messages before this one name the file"),
    (r"Execution occurred in running check", "checker-exception",
     "one of the checker's checks raised (often a file it needed is missing or malformed)",
     "look at the messages just before this one"),
]
_LINE = re.compile(r"^(?:\[[^\]]* (ERROR|WARNING)\] |(ERROR|WARNING):[^:]*:)(.*)$")


@dataclass
class OfficialResult:
    command: list[str]
    returncode: int
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    output: str = ""
    summary_ok: bool = False


def explain(message: str) -> Problem:
    for pattern, code, meaning, fix in EXPLAIN:
        if re.search(pattern, message):
            return Problem(code, message.strip(), meaning=meaning, fix=fix)
    return Problem("official", message.strip(), meaning="(no explanation on file)",
                   fix="read the official checker's message")


def parse_output(text: str) -> tuple[list[Problem], list[str], bool]:
    """Problems from ERROR lines; a failed check group whose path has no ERROR of its own
    (e.g. closed accuracy below target, logged only as a WARNING) is explained by its warnings."""
    problems: list[Problem] = []
    warnings: list[str] = []
    failed_groups: list[str] = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        level, message = m.group(1) or m.group(2), m.group(3)
        if level != "ERROR":
            if not message.startswith("Execution of check"):
                warnings.append(message)
            continue
        # a group's wrap-up line; the checkers before v5.0 say "<path> has issues"
        group = (re.match(r"Some .* Checks failed for: (.*)$", message)
                 or re.match(r"(\S+) has issues$", message))
        if group:
            failed_groups.append(group.group(1).strip())
        elif not message.startswith(("SUMMARY:", "NoResults")):
            problems.append(explain(message))
    for path in failed_groups:
        if any(path in p.message for p in problems):
            continue
        related = [w for w in warnings if path in w]
        problems += [explain(w) for w in related] or [
            Problem("official", f"checks failed for {path}", meaning="see the checker's output",
                    fix="run the official checker by hand for details")]
    if "Traceback (most recent call last)" in text:
        last = [ln for ln in text.splitlines() if ln.strip()][-1]
        problems.append(Problem("checker-crashed", f"the official checker crashed: {last}",
                                meaning="it met a tree it cannot handle (e.g. a datacenter system "
                                "with no required scenarios in the round)",
                                fix="run `mlharness check` (ours) for the underlying problem"))
    return problems, warnings, "SUMMARY: submission looks OK" in text


def checker_dir(checkout: Path) -> Path:
    """``<checkout>/tools/submission`` (or the path itself if it already is that folder)."""
    for cand in (checkout / "tools" / "submission", checkout):
        if (cand / "submission_checker" / "main.py").is_file():
            return cand
    raise ConfigError(f"no official submission checker under {checkout}",
                      hint="pass a checkout of github.com/mlcommons/inference (--official PATH)")


def round_checker(checkout: Path, round: str, script: str) -> Path:
    """An earlier round's single-file checker (``rules.checker_script``) under ``checkout``:
    the round's folder (``rounds/<round>``), the folder holding the rounds, or a checkout of
    mlcommons/inference at that round's tag."""
    for base in (checkout, checkout / round, checkout / "rounds" / round):
        if (base / script).is_file():
            return base / script
    raise ConfigError(f"no {round} submission checker ({script}) under {checkout}",
                      hint=f"pass the round's folder (../shared/official/rounds/{round}) or a "
                           f"checkout of mlcommons/inference at the {round} tag (--official PATH)")


def run_official(root: Path, checkout: Path, version: str, extra: list[str] | None = None,
                 timeout: float = 1800, script: str = "",
                 python: Path | None = None) -> OfficialResult:
    """Run ``python -m submission_checker.main --input ROOT --version V`` in the checkout; for a
    round with its own single-file checker (``script``, rounds before v5.0) ``python
    <script> --input ROOT --version V`` in the script's folder. ``python``: the interpreter
    (default this one)."""
    exe = str(python or sys.executable)
    with tempfile.TemporaryDirectory() as tmp:
        if script:
            path = round_checker(checkout, version, script)
            cwd, head = path.parent, [exe, str(path)]
        else:
            cwd, head = checker_dir(checkout), [exe, "-m", "submission_checker.main"]
        cmd = [*head, "--input", str(root.resolve()), "--version", version,
               "--csv", str(Path(tmp) / "summary.csv"), *(extra or [])]
        try:
            proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise ConfigError("the official checker did not finish in time",
                              hint="run it by hand to see where it stalls") from exc
    text = proc.stdout + proc.stderr
    problems, warnings, ok = parse_output(text)
    return OfficialResult(cmd, proc.returncode, problems, warnings, text, ok)
