"""``mlharness compliance``: run a compliance audit (TEST01/TEST04, the LLMs' TEST06/TEST07/TEST09)
and verify it as the official scripts do."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.markup import escape

from mlharness.cli.render import LiveProgress, console, console_err, print_json
from mlharness.cli.run import add_run_arguments, given_spec, resolved_spec
from mlharness.cli.spec_flags import TABLE_KEYS, add_flag, run_settings
from mlharness.compliance import (
    LlmVerdict, PerformanceCheck, Verdict, required_tests, run_audit, verify,
)
from mlharness.compliance.audit_config import TESTS
from mlharness.errors import ConfigError
from mlharness.record import RUN_FILE, RunRecord
from mlharness.rules import loadgen_seeds
from mlharness.rules.loader import DEFAULT_ROUND

EXAMPLES = """\
examples:
  # reference runs first (same settings as the audit), then the audit + verification
  mlharness run --benchmark demo --scenario SingleStream --target-latency 0.05
  mlharness run --benchmark demo --mode accuracy
  mlharness compliance --audit TEST01 --reference-perf runs/demo/SingleStream-performance-<t> \\
      --reference-accuracy runs/demo/Offline-accuracy-<t> --output results/demo/SingleStream
  mlharness compliance --audit TEST04 --reference-perf runs/demo/SingleStream-performance-<t> \\
      --output results/demo/SingleStream
  # every audit the benchmark needs (resnet50 and the demo: TEST01 and TEST04)
  mlharness compliance --reference-perf runs/demo/SingleStream-performance-<t> \\
      --reference-accuracy runs/demo/Offline-accuracy-<t> --output results/demo/SingleStream
  # verify an audit run made earlier, without running it again
  mlharness compliance --audit TEST04 --audit-run runs/compliance/TEST04/demo/<run> \\
      --reference-perf runs/demo/SingleStream-performance-<t> --output results/demo/SingleStream
  # the LLMs: TEST06 (llama3.1-8b, llama2-70b-99.9, deepseek-r1) needs only the performance run
  mlharness compliance --reference-perf runs/llama3.1-8b/Offline-performance-<t> \\
      --output results/llama3.1-8b/Offline
  # gpt-oss-120b: TEST07 runs on the GPQA compliance set, TEST09 on the performance set
  mlharness compliance --reference-perf runs/gpt-oss-120b/Offline-performance-<t> \\
      --test07-dataset acc/acc_eval_compliance_gpqa.parquet --output results/gpt-oss-120b/Offline

The audit takes its settings from the reference performance run's run.json; run flags given here
override them. Results go to <output>/TEST0X/ in the official layout. TEST06 counts EOS tokens
with --eos-token-id, else the eos_token of the run's tokenizer (--task-option tokenizer=DIR),
else the official default 2.

--json prints a list with one verdict per test.
exit codes: 0 TEST PASS (all tests), 1 TEST FAIL, 2 bad input (message + hint),
            3 the audit run failed
"""

_NOT_INHERITED = ("mode", "audit_config", "label", "purpose")


class _AuditFlag(argparse.Action):
    """``--audit TEST01 [TEST04]`` names audits. ``--test`` means a short run, as in ``run``; the
    old ``--test TEST01`` still names an audit, with a note (``deprecated_test``)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        tests = list(getattr(namespace, self.dest, None) or [])
        for value in values or []:
            if value.upper() not in TESTS:
                parser.error(f"{option_string}: expected one of {', '.join(TESTS)}, "
                             f"got {value!r}")
            if value.upper() not in tests:
                tests.append(value.upper())
        setattr(namespace, self.dest, tests)
        if option_string == "--test":
            if values:
                namespace.deprecated_test = True
            else:
                namespace.valid = False


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compliance", conflict_handler="resolve",
        help="run and verify a compliance audit (TEST01, TEST04, TEST06, TEST07, TEST09; "
             "TEST05 before v5.0)",
        description="Run a compliance audit — a performance run with the official audit.config "
                    "in its own run directory — then verify it against the reference runs "
                    "exactly as the official run_verification.py scripts do, writing "
                    "verify_*.txt and the audit's logs in the official places.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(p)
    comp = p.add_argument_group("compliance")
    comp.add_argument("--audit", dest="compliance_test", nargs="+", action=_AuditFlag,
                      metavar="TEST0X",
                      help="the audit(s) to run (default: those the benchmark needs in --round)")
    # run's --test (short run), which also still accepts the old `--test TEST01` spelling
    comp.add_argument("--test", dest="compliance_test", nargs="*", action=_AuditFlag,
                      metavar="TEST0X", help="short run, as in `mlharness run` (the default); `--test TEST01` is "
                           "the old spelling of --audit TEST01")
    add_flag(comp, run_settings()["round"],
             help="round whose seeds the audit uses and whose required tests are run when "
                  "--audit names none (default: the reference run's round, else "
                  f"{DEFAULT_ROUND}); TEST05 needs a round before v5.0")
    comp.add_argument("--reference-perf", type=Path, required=True, metavar="RUN_DIR",
                      help="the performance run being audited (run dir or results/.../<scenario>)")
    comp.add_argument("--reference-accuracy", type=Path, metavar="RUN_DIR",
                      help="the accuracy run, with its untruncated accuracy log (TEST01)")
    comp.add_argument("--output", type=Path, required=True, metavar="DIR",
                      help="scenario directory that receives TEST0X/")
    comp.add_argument("--audit-run", type=Path, metavar="RUN_DIR",
                      help="verify this existing audit run instead of running one")
    comp.add_argument("--dtype", choices=("byte", "float32", "int32", "int64"),
                      help="TEST01 response element type (default: the benchmark's)")
    comp.add_argument("--eos-token-id", type=int, metavar="N",
                      help="TEST06: the EOS token id (default: the eos_token of the run's "
                           "tokenizer, else the official default 2)")
    comp.add_argument("--test07-dataset", type=Path, metavar="FILE",
                      help="TEST07: the compliance set the audit runs on (gpt-oss-120b: "
                           "acc/acc_eval_compliance_gpqa.parquet)")
    comp.add_argument("--exact-only", action="store_true",
                      help="TEST01: no accuracy-delta check when the responses are not bit-exact")
    comp.add_argument("--force", action="store_true",
                      help="replace an earlier verification in <output>/<test>/")
    comp.add_argument("--json", action="store_true", help="print the verdict as JSON")
    comp.add_argument("--no-progress", action="store_true", help="no live progress display")
    p.set_defaults(func=compliance_command)


def inherit_reference_settings(args: argparse.Namespace, reference: Path) -> None:
    """Fill run flags the user did not give from the reference run's run.json spec."""
    if not (reference / RUN_FILE).is_file():
        return
    record = RunRecord.load(reference)
    if record.status == "failed":  # its settings may be right, but nothing was measured
        raise ConfigError(f"the reference run {reference} failed: "
                          f"{record.error_message or 'no result'}",
                          "audit a run that completed: run it again, then give its folder")
    spec = record.spec.model_dump()
    for key, value in spec.items():
        if key in _NOT_INHERITED or not hasattr(args, key) or value is None:
            continue
        if key in TABLE_KEYS:  # KEY=VALUE lists: the reference's first, the flags' win
            inherited = dict(value)
            if key == "backend_option":
                _server_options(args, inherited, reference)
            # the values as run.json holds them (a list stays a list, not its text)
            pairs = list(inherited.items()) + (getattr(args, key) or [])
            setattr(args, key, pairs or None)
        elif getattr(args, key) is None:
            setattr(args, key, value)


def _server_options(args: argparse.Namespace, options: dict[str, Any], reference: Path) -> None:
    """An openai run's servers: ``--endpoint`` (and ``--failover``) given here replace the
    reference's; endpoints whose credentials run.json holds as ``***`` must be given again."""
    if getattr(args, "endpoints", None):
        options.pop("endpoints", None)
        if getattr(args, "failover", None) is not None:
            options.pop("failover", None)
    masked = [url for url in options.get("endpoints") or [] if "***" in str(url)]
    if masked:
        raise ConfigError(f"the reference run {reference} recorded its endpoint as "
                          f"{masked[0]}: credentials are never written",
                          "give the server again: --endpoint http://USER:PASS@HOST:PORT "
                          "(or the API key in an environment variable, api_key_env)")


def _tests_to_run(args: argparse.Namespace, benchmark: str) -> list[str]:
    if args.compliance_test:
        return list(args.compliance_test)
    round_name = args.round or DEFAULT_ROUND
    tests = required_tests(benchmark, round_name, "closed")
    if not tests:
        raise ConfigError(f"{benchmark} needs no compliance audit in round {round_name}",
                          hint="name one with --audit TEST0X to run it anyway")
    return tests


def compliance_command(args: argparse.Namespace) -> int:
    if getattr(args, "deprecated_test", False):
        console_err.print("note: `--test TEST0X` is the old spelling of `--audit TEST0X` (in both "
                          "run and compliance, --test means a short run)", style="yellow")
    for flag, path in (("--reference-perf", args.reference_perf),
                       ("--reference-accuracy", args.reference_accuracy),
                       ("--audit-run", args.audit_run)):
        if path is not None and not path.is_dir():
            raise ConfigError(f"{flag} {path}: no such directory", hint="give a run directory")
    if args.audit_run is not None and len(args.compliance_test or []) != 1:
        raise ConfigError("--audit-run verifies one audit",
                          hint="name its test: --audit TEST01 or --audit TEST04")
    spec = None
    if args.audit_run is None:
        inherit_reference_settings(args, args.reference_perf)
        spec = resolved_spec(*given_spec(args, mode="performance"), quiet=args.json,
                             progress=not args.no_progress)
    tests = _tests_to_run(args, spec.benchmark if spec else "")
    if "TEST05" in tests and spec is not None:
        loadgen_seeds(spec.round, test05=True)  # refused before any run: a round that had TEST05
    if "TEST01" in tests and args.reference_accuracy is None:
        raise ConfigError("TEST01 compares against the accuracy run",
                          hint="pass --reference-accuracy RUN_DIR (an untruncated accuracy log)")
    if "TEST07" in tests and spec is not None and args.test07_dataset is None:
        raise ConfigError("TEST07 runs on the GPQA compliance set, not the performance data set",
                          hint="pass --test07-dataset acc/acc_eval_compliance_gpqa.parquet (from "
                               "the gpt-oss-120b dataset download)")
    if args.test07_dataset is not None and not args.test07_dataset.is_file():
        raise ConfigError(f"--test07-dataset {args.test07_dataset}: no such file",
                          hint="give the compliance set's parquet or pickle file")
    verdicts = []
    for test in tests:
        audit_run = args.audit_run
        if spec is not None:
            if not args.json:
                console.print(f"running the {test} audit: {spec.benchmark} {spec.scenario} "
                              f"performance with the official audit.config …")
            show = not args.no_progress and not args.json  # a bar, or lines in a log
            with LiveProgress(enabled=show) as bar:
                audit_run = run_audit(test, spec, spec.output_dir / "compliance" / test, bar,
                                      dataset=args.test07_dataset if test == "TEST07"
                                      else None).run_dir
        verdict = verify(test, args.reference_perf, args.reference_accuracy, audit_run,
                         args.output, dtype=args.dtype, overwrite=args.force,
                         score_fallback=not args.exact_only, eos_token_id=args.eos_token_id)
        verdicts.append(verdict)
        if not args.json:
            show_verdict(verdict)
    if args.json:
        print_json([v.to_dict() for v in verdicts])
    return 0 if all(v.passed for v in verdicts) else 1


def _perf_detail(perf: PerformanceCheck) -> str:
    if perf.failure:
        return perf.failure
    if perf.low is not None and perf.high == float("inf"):  # TEST05 (v3.1+): throughput
        return (f"test {perf.test_score:.6g} > {perf.low:.6g} "
                f"(reference {perf.reference_score:.6g} -{perf.threshold:.0%})")
    if perf.low is None:  # TEST04, TEST05 latency: one-sided
        return (f"test {perf.test_score:.6g} < {perf.high:.6g} "
                f"(reference {perf.reference_score:.6g} +{perf.threshold:.0%})")
    return (f"{perf.low:.6g} <= test {perf.test_score:.6g} <= {perf.high:.6g} "
            f"(reference {perf.reference_score:.6g} ±{perf.threshold:.0%})")


def _show_llm_verdict(verdict: LlmVerdict) -> None:
    """TEST06/TEST07/TEST09: each check with its detail, then where the files are."""
    from rich.table import Table

    table = Table(title=f"{verdict.test} — {verdict.scenario or '?'}", title_justify="left")
    for col in ("check", "result", "detail"):
        table.add_column(col, no_wrap=col != "detail")
    for check in verdict.checks:
        result = ("[dim]skipped[/]" if check.passed is None
                  else "[green]pass[/]" if check.passed else "[red]fail[/]")
        table.add_row(check.name, result, escape(check.detail))
    console.print(table)
    _verdict_footer(verdict)


def _verdict_footer(verdict: Verdict | LlmVerdict) -> None:
    """The notes, where the audit run and the written files are, and the overall word."""
    for note in verdict.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")
    console.print(escape(f"audit run: {verdict.audit_run}"))
    console.print(escape(f"written:   {verdict.output_dir}/"))
    overall = "[bold green]TEST PASS[/]" if verdict.passed else "[bold red]TEST FAIL[/]"
    console.print(f"{verdict.test}: {overall}")


def show_verdict(verdict: Verdict | LlmVerdict) -> None:
    """One screen: each check with its reason, then where the files are."""
    from rich.table import Table

    if isinstance(verdict, LlmVerdict):  # TEST06/TEST07/TEST09
        _show_llm_verdict(verdict)
        return

    table = Table(title=f"{verdict.test} — {verdict.performance.scenario or '?'}",
                  title_justify="left")
    for col in ("check", "result", "detail"):
        table.add_column(col, no_wrap=col != "detail")

    def mark(ok: bool) -> str:
        return "[green]TEST PASS[/]" if ok else "[red]TEST FAIL[/]"

    if verdict.accuracy is not None:
        acc = verdict.accuracy
        table.add_row("accuracy", mark(acc.passed),
                      f"{acc.reason} ({acc.matched} matched, {acc.mismatched} differ, "
                      f"dtype {acc.dtype})")
    delta = verdict.accuracy_delta
    if delta is not None:
        table.add_row("accuracy delta", mark(delta.passed),
                      f"{delta.metric} {delta.baseline:.4g} (accuracy run, same samples) vs "
                      f"{delta.compliance:.4g} (audit): {delta.delta_percent:.3g}% "
                      f"(allowed {delta.allowed_percent:g}%)")
    table.add_row("performance", mark(verdict.performance.passed),
                  _perf_detail(verdict.performance))
    console.print(table)
    _verdict_footer(verdict)
    if delta is not None and delta.passed:
        console.print("[dim]The responses are not bit-exact; TEST01 counts through the accuracy "
                      "delta (accuracy/baseline_accuracy.txt, compliance_accuracy.txt).[/]")
