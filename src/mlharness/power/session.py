"""``mlharness run --power``: one performance run under the official MLCommons power client.

The official client (``ptd_client_server/client.py``, run unchanged) connects to the power server
on the director, syncs clocks over NTP, and runs the workload twice, ranging then testing, while
the server records the analyzer through PTDaemon. The workload is mlharness itself
(``mlharness.power.workload``) writing its LoadGen logs under ``<run dir>/loadgen/``. The client
writes the session straight into the run directory (``-T -o <run dir>``)::

    <run dir>/power/{client.json, client.log, ptd_logs.txt, server.json, server.log}
             /ranging/{mlperf_log_detail.txt, mlperf_log_summary.txt, spl.txt}
             /run_1/{mlperf_log_detail.txt, mlperf_log_summary.txt, spl.txt, ptd_out.txt}
             /loadgen/<benchmark>/<scenario>-{ranging,testing}-<time>/   (the two mlharness runs)
             /power_client.txt   (the client's console output)

The client picks the first ``mlperf_log_detail.txt`` under ``-L`` whose power window lies inside
the workload's run time, so nothing else (no ``--target-qps auto`` probe runs) may be written
there. The testing run's LoadGen logs are also copied to the run directory itself, so the run
reads like any other; ``run.json`` gets a ``power`` section with the round's metric.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from mlharness.errors import ConfigError, HarnessError, RunFailed
from mlharness.files import write_json_atomic
from mlharness.loadgen.mllog import parse_run_logs
from mlharness.power.metric import average_in_window, metric_from_logs, read_spl, window_from_detail
from mlharness.power.official import PowerDev, clean_env, find_power_dev
from mlharness.record import RunRecord, read_record
from mlharness.runner.execute import RunOutcome
from mlharness.runner.journal import Journal
from mlharness.runner.rundir import new_run_dir
from mlharness.spec import RunSpec

DEFAULT_PORT = 4950  # ptd_client_server/lib/common.py DEFAULT_PORT
SIMULATOR_NAME = "mlharness-ptd-simulator"
CLIENT_LOG = "power_client.txt"
#: files of a power session the submission needs (compliance/check.py RESULT_PATHS)
SESSION_FILES = {
    "power": ("client.json", "client.log", "ptd_logs.txt", "server.json", "server.log"),
    "ranging": ("mlperf_log_detail.txt", "mlperf_log_summary.txt", "spl.txt"),
    "run_1": ("mlperf_log_detail.txt", "mlperf_log_summary.txt", "spl.txt"),
}
#: extra seconds of client silence allowed on top of --stall-timeout (the server waits 10 s
#: before and after each measurement: ANALYZER_SLEEP_SECONDS in lib/server.py)
SILENCE_MARGIN_S = 25.0


@dataclass
class PowerOptions:
    """The ``--power*`` flags."""

    server: str  # HOST[:PORT]
    ntp: str | None = None  # default: the power server's host
    settle_s: float = 0.0
    power_dev: Path | None = None
    label: str | None = None

    def host_port(self) -> tuple[str, int]:
        host, _, port = self.server.rpartition(":") if ":" in self.server else (self.server, "", "")
        if not host:
            raise ConfigError(f"bad --power-server {self.server!r}", hint="use HOST or HOST:PORT")
        try:
            number = int(port) if port else DEFAULT_PORT
        except ValueError:
            raise ConfigError(f"bad port in --power-server {self.server!r}",
                              hint="use HOST:PORT, e.g. 192.168.1.2:4950") from None
        return host, number

    def to_dict(self) -> dict[str, Any]:
        host, port = self.host_port()
        return {"server": f"{host}:{port}", "ntp": self.ntp or host, "settle_s": self.settle_s}


Progress = Callable[[str], None]

# the client's console lines mlharness reacts to (lib/client.py)
_PHASE = re.compile(r"Running workload in (\w+) mode")
_FAILURES: list[tuple[str, str, str, int]] = [
    (r"Could not connect to the server", "the power server {server} is unreachable",
     "start the MLCommons power server on the director (power_server -c server.conf) and check "
     "--power-server HOST:PORT and the firewall", 2),
    (r"Handshake failed", "{server} does not speak the MLCommons power protocol of this client",
     "run the same power-dev version on the director and here", 2),
    (r"Could not synchronize with|Could not synchronize", "clock synchronisation over NTP failed",
     "give a reachable NTP server with --ntp (UDP 123), the same one as the server's ntpServer", 2),
    (r"The server is disconnected|Remote peer disconnected",
     "the power server dropped the connection during the measurement",
     "see power/ on the director and power_client.txt here; PTDaemon or the server stopped", 3),
    (r"Got an unexpecting response from the server",
     "the power server rejected a measurement step: {reply}",
     "see the server's log on the director (PTDaemon ranges, analyzer connection)", 3),
    (r"CalledProcessError", "the workload (the mlharness run) failed",
     "see loadgen/ in the run directory and power_client.txt", 3),
    (r"to be a directory containing loadgen logs",
     "the power client found no LoadGen log of this measurement",
     "see power_client.txt; the workload must write its logs under the client's -L directory", 3),
]


def _label(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "-", text)[:60]


def client_command(dev: PowerDev, opts: PowerOptions, run_dir: Path, plan: Path, label: str) -> list[str]:
    host, port = opts.host_port()
    workload = f"{shlex.quote(sys.executable)} -m mlharness.power.workload {shlex.quote(str(plan))}"
    return [sys.executable, str(dev.client), "--addr", host, "--port", str(port),
            "--ntp", opts.ntp or host, "--run-workload", workload,
            "--loadgen-logs", str(run_dir / "loadgen"), "--output", str(run_dir),
            "--no-timestamp-path", "--label", label]


@dataclass
class ClientOutcome:
    returncode: int | None
    stalled: bool
    text: str


def run_client(cmd: list[str], cwd: Path, log: Path, silence_s: float,
               progress: Progress) -> ClientOutcome:
    """Run the official client; tee its output to ``log``; end it after ``silence_s`` of silence."""
    # a session of its own: on any way out of here (Ctrl-C, SIGTERM, a bug) the client and the
    # workload it started end with us instead of talking on to the power server
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1, env=clean_env(), start_new_session=True)
    try:
        return _follow(proc, log, silence_s, progress)
    finally:
        if proc.poll() is None:
            _end_group(proc)


def _end_group(proc: subprocess.Popen) -> None:
    """End ``proc`` and every process of its session: SIGTERM, then SIGKILL after 5 s."""
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _follow(proc: subprocess.Popen, log: Path, silence_s: float,
            progress: Progress) -> ClientOutcome:
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    chunks: list[str] = []
    last = time.monotonic()
    stalled = False
    with open(log, "w") as out:
        while True:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                if time.monotonic() - last > silence_s:
                    stalled = True
                    _end_group(proc)
                    break
                continue
            if line is None:
                break
            last = time.monotonic()
            out.write(line)
            out.flush()
            chunks.append(line)
            m = _PHASE.search(line)
            if m:
                progress(f"{m.group(1)} run under power measurement")
            elif "Done runs" in line:
                progress("collecting power logs from the server")
    rc = proc.wait()
    return ClientOutcome(None if stalled else rc, stalled, "".join(chunks))


def classify(outcome: ClientOutcome, server: str, silence_s: float) -> HarnessError:
    """The one-line error for a client that did not finish."""
    if outcome.stalled:
        return RunFailed(f"no progress from the power client for {silence_s:.0f} s: the power "
                         "server or PTDaemon stalled", hint="see power_client.txt in the run "
                         "directory and the server's console on the director")
    known = known_failure(outcome.text, server)
    if known is not None:
        return known
    tail = [ln for ln in outcome.text.splitlines() if ln.strip()][-1:] or ["(no output)"]
    err = HarnessError(f"the power client failed (exit {outcome.returncode}): {tail[0]}",
                       "see power_client.txt in the run directory")
    err.exit_code = 3
    return err


def known_failure(text: str, server: str) -> HarnessError | None:
    """The one-line error for a failure the client's output names (it exits 0 on some, e.g.
    ``exit()`` after a failed clock synchronisation: lib/client.py ``sync_check``)."""
    replies = re.findall(r"Got response: '([^']*)'", text)
    reply = replies[-1] if replies else "?"
    for pattern, message, hint, code in _FAILURES:
        if re.search(pattern, text):
            err = HarnessError(message.format(server=server, reply=reply), hint)
            err.exit_code = code
            return err
    return None


def analyzer_identity(run_dir: Path) -> str:
    """PTDaemon's answer to ``Identify`` as the server recorded it."""
    try:
        msgs = json.loads((run_dir / "power" / "server.json").read_text()).get("ptd_messages") or []
    except (OSError, json.JSONDecodeError):
        return ""
    return next((m.get("reply", "") for m in msgs if m.get("cmd") == "Identify"), "")


def missing_session_files(run_dir: Path) -> list[str]:
    return [f"{d}/{n}" for d, names in SESSION_FILES.items() for n in names
            if not (run_dir / d / n).is_file()]


def prepare(opts: PowerOptions) -> PowerDev:
    """Validate the options and find the official client before anything runs."""
    opts.host_port()
    if opts.settle_s < 0:
        raise ConfigError("--power-settle must be >= 0", hint="e.g. --power-settle 30")
    return find_power_dev(opts.power_dev)


def testing_run_dir(run_dir: Path) -> Path | None:
    found = sorted((run_dir / "loadgen").glob("*/*-testing-*"))
    return found[-1] if found else None


def power_section(run_dir: Path, scenario: str, opts: PowerOptions) -> dict[str, Any]:
    """run.json's ``power``: the metric from run_1, the ranging average, the analyzer."""
    metric = metric_from_logs(run_dir / "run_1", scenario)
    section: dict[str, Any] = {"kind": "mlperf-power", **opts.to_dict(), **metric.to_dict()}
    try:
        rwin = window_from_detail(run_dir / "ranging" / "mlperf_log_detail.txt")
        ranging, _ = average_in_window(read_spl(run_dir / "ranging" / "spl.txt"), rwin)
        section["ranging_avg_watts"] = ranging
        section["testing_vs_ranging_pct"] = round((metric.avg_watts / ranging - 1) * 100, 2)
    except HarnessError:
        section["ranging_avg_watts"] = None
    identity = analyzer_identity(run_dir)
    session = json.loads((run_dir / "power" / "client.json").read_text()).get("session_name")
    section.update(session=session, analyzer=identity.split(",")[0],
                   simulated=identity.startswith(SIMULATOR_NAME))
    if section["simulated"]:
        section["note"] = "PTDaemon simulator: not an MLPerf power result"
    return section


def run_power(spec: RunSpec, opts: PowerOptions, progress: Progress | None = None
              ) -> RunOutcome:
    """Run ``spec`` (a performance RunSpec) under the official power client; return its
    RunRecord. Raises HarnessError (exit 2: set-up, exit 3: the measurement failed) with the
    run directory and its logs kept."""
    say = progress or (lambda text: None)
    dev = prepare(opts)
    if spec.mode != "performance":
        raise ConfigError("--power measures performance runs",
                          hint="drop --power for accuracy runs (or use --mode performance)")
    run_dir = new_run_dir(spec.output_dir, spec.benchmark, spec.scenario, spec.label or "power")
    plan = run_dir / "power_workload.json"
    write_json_atomic(plan, {"spec": spec.to_dict(), "loadgen_dir": str(run_dir / "loadgen"),
                             "settle_s": opts.settle_s})
    journal = Journal.open(run_dir, RunRecord(
        benchmark=spec.benchmark, spec=spec,
        power={"kind": "mlperf-power", **opts.to_dict(), "power_dev": str(dev.root)}))
    try:
        return _measure(spec, opts, dev, journal, plan, say)
    except BaseException as exc:  # a signal or a bug: the record never stays at "running"
        if not journal.finished:
            name = getattr(exc, "signal_name", "SIGINT")
            status, message = (("interrupted", f"interrupted by {name}")
                               if isinstance(exc, KeyboardInterrupt)
                               else ("error", f"{type(exc).__name__}: {exc}"))
            journal.finish(status, {"message": message})  # type: ignore[arg-type]
            if isinstance(exc, KeyboardInterrupt):
                exc.run_dir = run_dir  # type: ignore[attr-defined]
        raise


def _measure(spec: RunSpec, opts: PowerOptions, dev: PowerDev, journal: Journal, plan: Path,
             say: Progress) -> RunOutcome:
    """The power session of ``run_power`` once its record is open."""
    run_dir, record = journal.run_dir, journal.record
    silence = spec.stall_timeout + SILENCE_MARGIN_S + opts.settle_s
    label = _label(opts.label or f"{spec.benchmark}-{spec.scenario}")
    say(f"power client → {opts.to_dict()['server']} (NTP {opts.to_dict()['ntp']}), "
        f"run directory {run_dir}")
    outcome = run_client(client_command(dev, opts, run_dir, plan, label), run_dir,
                         run_dir / CLIENT_LOG, silence, say)

    def fail(err: HarnessError, status: str) -> HarnessError:
        journal.finish(status, {"message": err.message, "hint": err.hint})  # type: ignore[arg-type]
        err.hint = f"{err.hint}; logs kept in {run_dir}" if err.hint else f"logs kept in {run_dir}"
        return err

    missing = missing_session_files(run_dir)
    testing = testing_run_dir(run_dir)
    known = known_failure(outcome.text, opts.to_dict()["server"])
    if outcome.returncode != 0 or ((missing or testing is None) and known is not None):
        err = known if outcome.returncode == 0 and known is not None else \
            classify(outcome, opts.to_dict()["server"], silence)
        raise fail(err, "error" if err.exit_code == 2 else "failed")
    if missing or testing is None:
        raise fail(RunFailed("the power session is incomplete: missing "
                             + ", ".join(missing or ["the testing run"]),
                             hint="see power_client.txt"), "failed")
    try:
        inner = read_record(testing)
    except HarnessError as exc:
        raise fail(RunFailed(f"the testing run's record is unreadable: {exc.message}",
                             hint="see power_client.txt"), "failed") from None
    for name in ("mlperf_log_summary.txt", "mlperf_log_detail.txt", "mlperf_log_accuracy.json",
                 "mlperf_log_trace.json", "user.conf"):
        if (testing / name).is_file():
            shutil.copyfile(testing / name, run_dir / name)
    no_metric = None
    try:
        power = power_section(run_dir, spec.scenario, opts)
    except HarnessError as exc:  # e.g. a run shorter than one sample, or no valid reading
        no_metric = exc
        power = {"kind": "mlperf-power", **opts.to_dict(), "metric": None,
                 "error": f"{exc.message} ({exc.hint})"}
    power["power_dev"] = str(dev.root)
    # the testing run's findings are this run's (its own start, purpose and process are not)
    for key in INNER_FIELDS:
        setattr(record, key, getattr(inner, key))
    record.power = power
    record.loadgen_runs = {  # type: ignore[attr-defined]  # an extra field of power runs
        "ranging": str(next(iter(sorted((run_dir / "loadgen").glob("*/*-ranging-*"))), "")),
        "testing": str(testing)}
    result = None
    try:
        result = parse_run_logs(run_dir)
        record.result = result
    except HarnessError:
        pass
    if no_metric is not None:  # a power run without its power metric is no result
        raise fail(RunFailed(f"no power metric: {no_metric.message}", hint=no_metric.hint),
                   "failed")
    journal.finish(inner.status, inner.error)
    return RunOutcome(run_dir, record, result)


#: what a power run takes from its testing run's record
INNER_FIELDS = ("loadgen_model", "settings", "test_config", "task", "backend", "sut", "system",
                "versions", "result", "accuracy", "model_git_commit", "distributed")
