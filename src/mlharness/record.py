"""The run record: the typed ``run.json`` every run directory holds, the one verdict of a run,
and whether a record can be trusted as a result.

Written by the runner, read by everything that looks at a run directory (``submit``,
``compliance``, the CLI tables, tuning, the store) through ``read_record`` and
``untrusted_reason``, so that a run left at ``"running"`` by a crash, a probe run or an
unreadable file is treated the same way everywhere. ``format`` names the version; records of the previous
version (``mlharness-run/1``: old setting names) are migrated on load. Fields another part of
mlharness adds later are kept as they are (``extra="allow"``).
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler,
                      ValidationError, field_validator, model_serializer)

from mlharness.errors import ConfigError, HarnessError
from mlharness.files import write_json_atomic
from mlharness.loadgen.mllog import LoadGenResult
from mlharness.options import field_path
from mlharness.redact import scrub_data
from mlharness.spec import RENAMED, RunSpec
from mlharness.tasks.base import AccuracyResult

RUN_FORMAT = "mlharness-run/2"
_OLD_FORMATS = ("mlharness-run/1",)
RUN_FILE = "run.json"
Status = Literal["running", "ok", "failed", "error", "interrupted"]


class Settings(BaseModel):
    """The effective LoadGen settings of the run (``loadgen.settings.effective_settings``)."""

    values: dict[str, float | int] = Field(default_factory=dict)
    sources: dict[str, str] = Field(default_factory=dict)
    user_conf: dict[str, float | int] = Field(default_factory=dict)


class RunError(BaseModel):
    """``run.json``'s ``error``: why a run did not end ``ok``. ``message`` is what screens and
    the index show; what else the runner knew stays as written (``hint``, ``type``,
    ``traceback``, ``errno``, a crashed worker's ``crash_log`` ...)."""

    model_config = ConfigDict(extra="allow")

    message: str = ""


class SutRecord(BaseModel):
    """``run.json``'s ``sut``: how the engine ran the samples. A batching run records the
    policy (``max_batch``, ``inline``, ``sort_by_length``), its ``workers``, the warm-up and,
    with ``--instances``, the ``placement``; a streaming (LLM) run its ``concurrency`` and
    warm-up requests. What a run does not have is left out of the file."""

    model_config = ConfigDict(extra="allow")

    max_batch: int | None = None
    inline: bool | None = None
    sort_by_length: bool | None = None
    workers: int | None = None
    warmup_batches: int | None = None
    #: the untimed warm-up: how long it took and how many input shapes it ran
    warmup_s: float | None = None
    warmup_shapes: int | None = None
    #: ``--instances``: each instance's cores and NUMA nodes, and notes on a bad placement
    placement: dict[str, Any] | None = None
    streaming: bool | None = None
    concurrency: int | None = None
    warmup_requests: int | None = None
    #: a streaming backend's report: requests sent and failed per server, and how many it kept
    #: in flight (given, or measured: the levels tried and where it settled)
    stream_report: dict[str, Any] | None = None

    @model_serializer(mode="wrap")
    def _without_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}

    @property
    def notes(self) -> list[str]:
        """The placement's notes (none without ``--instances``)."""
        return [str(n) for n in (self.placement or {}).get("notes", [])]


class RunRecord(BaseModel):
    """``run.json``."""

    model_config = ConfigDict(extra="allow")

    format: str = RUN_FORMAT
    status: Status = "running"
    error: RunError | None = None
    benchmark: str
    loadgen_model: str = ""
    purpose: str | None = None  # None: a real run; e.g. "probe" for tuning runs
    spec: RunSpec
    settings: Settings = Field(default_factory=Settings)
    test_config: dict[str, Any] = Field(default_factory=dict)
    task: dict[str, Any] = Field(default_factory=dict)
    backend: dict[str, Any] | None = None
    sut: SutRecord | None = None
    system: dict[str, Any] = Field(default_factory=dict)
    versions: dict[str, Any] = Field(default_factory=dict)
    result: LoadGenResult | None = None  # what LoadGen's logs say (``loadgen.mllog``)
    accuracy: AccuracyResult | None = None  # the task's score of an accuracy run
    started: str | None = None
    finished: str | None = None
    duration_s: float | None = None
    pid: int | None = None  # the process that writes the record while it runs, and its host:
    host: str | None = None  # readers tell a live run from one left at "running" by a crash
    #: when that process started (clock ticks since boot, /proc/PID/stat field 22) and the boot
    #: it started in: a pid reused by another process after a crash is not taken for the run
    pid_start: int | None = None
    boot_id: str | None = None
    model_git_commit: str | None = None  # the commit of a model file kept in git, if any
    distributed: dict[str, Any] | None = None  # remote nodes / Ray replicas: who served what
    power: dict[str, Any] | None = None  # --power: the official measurement (docs/power.md)
    energy: dict[str, Any] | None = None  # --energy: a RAPL estimate, not an MLPerf result
    #: the catalogue artefacts (``mlharness get``) the run used: role, name, checksum, source
    artefacts: list[dict[str, Any]] | None = None

    @field_validator("format")
    @classmethod
    def _format(cls, value: str) -> str:
        if value != RUN_FORMAT:
            raise ValueError(f"format {value!r}, expected {RUN_FORMAT}")
        return value

    # ---- files ------------------------------------------------------------------------------

    def save(self, run_dir: Path) -> Path:
        path = Path(run_dir) / RUN_FILE
        write_json_atomic(path, self.to_dict())
        return path

    @classmethod
    def load(cls, run_dir: Path) -> RunRecord:
        """Read ``run_dir/run.json``; ConfigError (one line + hint) when it is missing,
        unreadable, not an object, of an unknown format or without valid run settings."""
        path = Path(run_dir) / RUN_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{run_dir}: no {RUN_FILE}",
                              hint="point at a directory written by `mlharness run`") from None
        except IsADirectoryError:
            raise ConfigError(f"{run_dir}: unreadable {RUN_FILE} (Is a directory, not the "
                              "run's record)", hint="move that folder away; the run's record is "
                              "lost, re-run the test") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{run_dir}: unreadable {RUN_FILE} ({exc})",
                              hint="the file is damaged; re-run the test") from None
        return cls.from_dict(data, str(path))

    @classmethod
    def from_dict(cls, data: Any, where: str = RUN_FILE) -> RunRecord:
        damaged = "the file is damaged; re-run the test"
        if not isinstance(data, dict):
            raise ConfigError(f"{where} holds a JSON {type(data).__name__}, not an object",
                              hint=damaged)
        if data.get("format") not in (RUN_FORMAT, *_OLD_FORMATS):
            raise ConfigError(f"{where} has format {data.get('format')!r}",
                              hint=f"expected {RUN_FORMAT}; re-run with this mlharness version")
        if not isinstance(data.get("spec"), dict):
            raise ConfigError(f"{where} has no run settings ('spec')", hint=damaged)
        data = migrate(data)
        try:
            return cls.model_validate(data)
        except HarnessError as exc:
            raise ConfigError(f"{where}: {exc.message}", hint=exc.hint) from None
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            message = err["msg"].removeprefix("Value error, ")
            raise ConfigError(f"{where}: {field_path(err['loc'])}: {message}",
                              hint=f"expected an {RUN_FORMAT} record written by `mlharness run`"
                              ) from None

    def to_dict(self) -> dict[str, Any]:
        """The record as ``run.json`` holds it: secrets masked (``mlharness.redact``), for
        every writer of the file and everything shown from it."""
        return scrub_data(self.model_dump(mode="json"))

    # ---- meaning ----------------------------------------------------------------------------

    @property
    def error_message(self) -> str:
        """Why the run did not end ok, in the runner's words ("" when it said nothing)."""
        return self.error.message if self.error else ""

    def verdict(self) -> tuple[str, str]:
        """(verdict, why): VALID/INVALID for performance, PASS/FAIL/DONE for accuracy, FAILED
        when the run did not finish. The only place a run's verdict is decided."""
        if self.status != "ok":
            return "FAILED", self.error_message or self.status
        acc = self.accuracy
        if acc is not None:
            verdict = {True: "PASS", False: "FAIL", None: "DONE"}[acc.passed]
            failures = list(acc.failures)
            if acc.passed is False and acc.target is not None and acc.value < acc.target:
                failures.insert(0, f"{acc.shown} misses its target" if acc.shown else
                                f"{acc.metric} {acc.value:.3f} is below the target "
                                f"{acc.target:.3f}")
            return verdict, "; ".join(failures) if acc.passed is False else ""
        if self.result is not None and self.result.valid:
            return "VALID", ""
        reasons = self.result.reasons if self.result is not None else []
        return "INVALID", "; ".join(reasons) or "LoadGen marked it INVALID"

    @property
    def exit_code(self) -> int:
        """0 VALID / PASS / DONE, 1 INVALID / FAIL / LoadGen errors, 3 the run failed."""
        verdict, _ = self.verdict()
        if verdict == "FAILED":
            return 3
        if self.result is not None and self.result.errors:
            return 1
        return 0 if verdict in ("VALID", "PASS", "DONE") else 1


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """A record of an earlier format as the current one (renamed settings)."""
    if data.get("format") not in _OLD_FORMATS:
        return data
    data = dict(data)
    spec = dict(data.get("spec") or {})
    for old, new in RENAMED.items():
        if old in spec:
            value = spec.pop(old)
            spec[new] = (not value) if old == "short" else value
    spec.setdefault("task_option", {})
    data["spec"] = spec
    data["format"] = RUN_FORMAT
    return data


# ---- trust: may a record be used as a result? ------------------------------------------------
#: path components that hold runs made for another purpose than a result
PROBE_DIRS = ("_tune",)
#: ``purpose`` values of a run meant as a result (absent in records written before the field)
RESULT_PURPOSES = (None, "", "result", "run")


def read_record(path: Path) -> RunRecord:
    """``path/run.json`` as the typed record; ConfigError when it is missing, unreadable, not
    ours or of an unknown format (``RunRecord.load``)."""
    return RunRecord.load(Path(path))


def process_start(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (Linux: field 22 of
    /proc/PID/stat), or None where that cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def boot_id() -> str | None:
    """This boot of the machine (Linux), or None."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def owner_fields() -> dict[str, Any]:
    """What a running record stores so that readers can tell a live run from a dead one: the
    process, its host, and (Linux) when the process started and in which boot."""
    pid = os.getpid()
    return {"pid": pid, "host": socket.gethostname(), "pid_start": process_start(pid),
            "boot_id": boot_id()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_alive(pid: Any, host: Any, pid_start: Any = None, boot: Any = None) -> bool:
    """The process a running record names (``owner_fields``) still runs, here. With the
    start time (and boot id) recorded, a process that has the pid but started at another time,
    or in another boot, is another process (the pid was reused): the recorded one is dead.
    Records without them (written before they were stored) are judged by pid and host."""
    if not (isinstance(pid, int) and host == socket.gethostname() and _alive(pid)):
        return False
    if isinstance(boot, str) and (now_boot := boot_id()) is not None and boot != now_boot:
        return False
    if isinstance(pid_start, int) and (start := process_start(pid)) is not None:
        return start == pid_start
    return True


def running_state(record: RunRecord) -> str:
    """For a record at ``"running"``: ``"live"`` (its process still runs here) or ``"dead"``."""
    alive = process_alive(record.pid, record.host, record.pid_start, record.boot_id)
    return "live" if alive else "dead"


def probe_reason(path: Path, record: RunRecord) -> str | None:
    """Why this run is a probe (tuning or measuring a target), or None for a result run."""
    purpose = record.purpose
    if purpose not in RESULT_PURPOSES:
        return f"a {purpose} run, not a result"
    parts = set(Path(path).parts)
    for name in PROBE_DIRS:
        if name in parts:
            return f"a probe run (under {name}/)"
    return None


def untrusted_reason(path: Path, record: RunRecord) -> str | None:
    """Why this run cannot be used as a result, or None when it can.

    Not trusted: a run still at ``"running"`` (live, or left there by a crash or SIGKILL), any
    status other than ``"ok"``, a probe run, and an ok record without its result.
    """
    status = record.status
    if status == "running":
        if running_state(record) == "live":
            return f"still running (pid {record.pid})"
        return "left at 'running' by a process that died (crash or SIGKILL): never finished"
    if status != "ok":
        why = record.error_message
        return f"status {status!r}" + (f": {why}" if why else "")
    probe = probe_reason(path, record)
    if probe:
        return probe
    mode = record.spec.mode
    if mode == "performance" and not record.result:
        return "no LoadGen result recorded"
    if mode == "accuracy" and not record.accuracy:
        return "no accuracy score recorded"
    return None
