"""The result index: one SQLite file (``<runs>/mlharness.sqlite``) next to the run directories.

The run directories are the source of truth; the index is a cache of their ``run.json`` files
that makes listing and comparing fast. It is opened in WAL mode, each run is written in its own
``BEGIN IMMEDIATE`` transaction (so two runs finishing at the same moment both land: the second
waits for the first), and an index that is missing, corrupt or of another schema is rebuilt from
the directories rather than trusted. ``sync`` brings it up to date with the directories (new,
changed and removed runs) by comparing each ``run.json``'s mtime and size.

Nothing waits long for an index another process keeps locked: a run goes on without indexing
(``record_run``), and the commands that read it (``runs``, ``compare``, ``report``) read the run
directories into an index in memory instead (``open_store``), each after RUN_BUSY_TIMEOUT_S and
with one note.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, Iterator

from mlharness.record import process_alive
from mlharness.redact import scrub_data
from mlharness.rules import endpoints
from mlharness.store.row import RunRow, damaged_row, endpoints_row, marker, row_from_run_dir

INDEX_NAME = "mlharness.sqlite"
SCHEMA_VERSION = 5
#: index versions rebuilt in place from the run directories (1: kept wrong-typed values and no
#: rows for damaged run.json files; 2: LoadGen's word as the verdict, not the run's; 3: no start
#: time of the running process, so a reused pid read as a live run; 4: no token latencies of
#: the LLM runs, TTFT and TPOT p99 and their limits)
_REBUILT_VERSIONS = (1, 2, 3, 4)
BUSY_TIMEOUT_S = 60.0
#: how long a run, or a command that reads the index, waits for an index another process holds
#: locked before it goes on without it (the index is a cache: the run directories are the
#: truth, and ``mlharness runs reindex`` rebuilds it)
RUN_BUSY_TIMEOUT_S = 2.0
#: an index held in memory (``Store(..., in_memory=True)``), read from the directories
_MEMORY = ":memory:"

_JSON_COLUMNS = ("settings", "versions", "reasons")
_BOOL_COLUMNS = ("valid", "accuracy_passed")
_ROW_COLUMNS = tuple(f.name for f in fields(RunRow))
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS runs (
    {", ".join(("path TEXT PRIMARY KEY" if c == "path" else c) for c in _ROW_COLUMNS)},
    run_json_mtime_ns INTEGER, run_json_size INTEGER, indexed_at REAL
);
CREATE INDEX IF NOT EXISTS runs_by_bench ON runs (benchmark, scenario, mode);
CREATE INDEX IF NOT EXISTS runs_by_started ON runs (started);
"""


@dataclass(kw_only=True)
class IndexedRun(RunRow):
    """A row read back from the index: the RunRow, the size and mtime of the run.json it was
    read from and when, and the run's live ``state``: its ``status`` once finished (ok, failed,
    error, interrupted, damaged), else ``running`` while its process lives and ``crashed``
    after (see :func:`run_state`)."""

    run_json_mtime_ns: int
    run_json_size: int
    indexed_at: float
    state: str


#: the columns a query reads: every IndexedRun field but the live state
_READ_COLUMNS = tuple(f.name for f in fields(IndexedRun) if f.name != "state")


class IndexError_(Exception):
    """The index file cannot be used (corrupt, foreign schema)."""


def index_path(root: Path) -> Path:
    return Path(root) / INDEX_NAME


def runs_root_of(run_dir: Path) -> Path:
    """The runs folder a run directory belongs to: ``<root>/<benchmark>/<run>`` or, for tune
    probes, ``<root>/_tune/<benchmark>/<run>``."""
    root = Path(run_dir).resolve().parent.parent
    return root.parent if root.name == "_tune" else root


def find_run_dirs(root: Path) -> Iterator[Path]:
    """Every directory under ``root`` that holds a ``run.json`` (runs, audits, tune probes); a
    folder named ``run.json`` counts too, so that the run shows as damaged instead of vanishing.
    An endpoints report (``rules.endpoints.is_report_dir``) is two: its folder (performance)
    and its ``accuracy`` folder."""
    root = Path(root)
    if not root.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(root):
        if "run.json" in filenames or "run.json" in dirnames:
            dirnames[:] = []  # a run directory holds no runs
            yield Path(dirpath)
        elif endpoints.is_report_dir(Path(dirpath)):  # an endpoints report: its two results
            dirnames[:] = []
            yield Path(dirpath)
            if (Path(dirpath) / endpoints.ACCURACY).is_file():
                yield Path(dirpath) / "accuracy"
        else:
            dirnames.sort()


class Store:
    """An open index over the run directories under ``root``."""

    def __init__(self, root: Path, busy_timeout: float = BUSY_TIMEOUT_S,
                 in_memory: bool = False) -> None:
        self.root = Path(root).resolve()
        self.path = Path(_MEMORY) if in_memory else index_path(self.root)
        self.rebuilt = False
        self.busy_timeout = busy_timeout
        self.conn = self._open()

    # -- opening, validation, rebuild -------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        if str(self.path) != _MEMORY:
            self.root.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(self.path), timeout=self.busy_timeout, isolation_level=None,
                               factory=_Connection)
        # a short timeout is the whole wait: no retries on top of it (record_run)
        conn.retries = 50 if self.busy_timeout >= BUSY_TIMEOUT_S else 1
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        _retry(lambda: conn.execute("PRAGMA journal_mode = WAL"), conn.retries)
        conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    def _open(self) -> sqlite3.Connection:
        existed = self.path.is_file()
        conn = None
        try:
            conn = self._connect()
            if existed:
                self._check(conn)
            with _transaction(conn):
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version in _REBUILT_VERSIONS:
                    conn.execute("DROP TABLE IF EXISTS runs")
                    existed = False
                elif version not in (0, SCHEMA_VERSION):
                    raise IndexError_(f"schema version {version}, expected {SCHEMA_VERSION}")
                for stmt in filter(str.strip, _SCHEMA.split(";")):
                    conn.execute(stmt)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                have = {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
                if not set(_ROW_COLUMNS) <= have:
                    raise IndexError_("the runs table lacks columns: an older index")
        except (sqlite3.DatabaseError, IndexError_) as exc:
            if conn is not None:
                conn.close()
            if _busy(exc):  # locked by another process: not corrupt, keep it
                raise
            conn = self._replace_corrupt()
            existed = False
        if not existed:
            self.conn = conn
            self.reindex()
            self.rebuilt = True
        return conn

    @staticmethod
    def _check(conn: sqlite3.Connection) -> None:
        row = conn.execute("PRAGMA quick_check").fetchone()
        if row is None or row[0] != "ok":
            raise IndexError_(f"quick_check: {row[0] if row else 'no answer'}")

    def _replace_corrupt(self) -> sqlite3.Connection:
        """Move an unusable index aside (kept for inspection) and start a fresh one."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for suffix in ("", "-wal", "-shm"):
            src = Path(str(self.path) + suffix)
            if src.exists():
                src.replace(Path(f"{self.path}.corrupt-{stamp}{suffix}"))
        self.rebuilt = True
        conn = self._connect()
        with _transaction(conn):
            for stmt in filter(str.strip, _SCHEMA.split(";")):
                conn.execute(stmt)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        return conn

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- writing ----------------------------------------------------------------------------
    def record(self, run_dir: Path) -> RunRow | None:
        """Read ``run_dir``'s run.json and upsert its row in one transaction (a damaged
        run.json gets a ``damaged`` row saying why, replacing what was read before).

        Returns None when the directory holds no run.json.
        """
        run_dir = Path(run_dir).resolve()
        read = _read_row(run_dir, self.root)
        if read is None:
            return None
        row, stat = read
        values = _to_sql(row)
        values.update(run_json_mtime_ns=stat.st_mtime_ns, run_json_size=stat.st_size,
                      indexed_at=time.time())
        cols = ", ".join(values)
        marks = ", ".join(f":{c}" for c in values)
        with _transaction(self.conn):
            self.conn.execute(f"INSERT OR REPLACE INTO runs ({cols}) VALUES ({marks})", values)
        return row

    def reindex(self) -> int:
        """Rebuild every row from the run directories; returns how many runs were indexed."""
        rows = []
        for run_dir in find_run_dirs(self.root):
            read = _read_row(run_dir, self.root)
            if read is not None:
                rows.append(read)
        with _transaction(self.conn):
            self.conn.execute("DELETE FROM runs")
            for row, stat in rows:
                values = _to_sql(row)
                values.update(run_json_mtime_ns=stat.st_mtime_ns, run_json_size=stat.st_size,
                              indexed_at=time.time())
                self.conn.execute(f"INSERT INTO runs ({', '.join(values)}) VALUES "
                                  f"({', '.join(':' + c for c in values)})", values)
        return len(rows)

    def sync(self) -> dict[str, int]:
        """Add runs the index lacks, re-read changed ones, drop vanished ones."""
        on_disk = {}
        for run_dir in find_run_dirs(self.root):
            try:
                stat = marker(run_dir).stat()
            except OSError:
                continue
            on_disk[run_dir.relative_to(self.root).as_posix()] = (run_dir, stat)
        known = {r["path"]: (r["run_json_mtime_ns"], r["run_json_size"]) for r in
                 self.conn.execute("SELECT path, run_json_mtime_ns, run_json_size FROM runs")}
        added = changed = 0
        for rel, (run_dir, stat) in on_disk.items():
            if rel not in known:
                added += self.record(run_dir) is not None
            elif known[rel] != (stat.st_mtime_ns, stat.st_size):
                changed += self.record(run_dir) is not None
        gone = [p for p in known if p not in on_disk]
        if gone:
            with _transaction(self.conn):
                self.conn.executemany("DELETE FROM runs WHERE path = ?", [(p,) for p in gone])
        return {"added": added, "changed": changed, "removed": len(gone)}

    # -- reading ----------------------------------------------------------------------------
    def query(self, benchmark: str | None = None, scenario: str | None = None,
              mode: str | None = None, valid: bool | None = None, since: str | None = None,
              kinds: tuple[str, ...] | None = ("run",), under: str | None = None,
              ) -> list[IndexedRun]:
        """The matching runs, oldest first, each with its live ``state``."""
        where, args = [], []
        for col, value in (("benchmark", benchmark), ("mode", mode)):
            if value:
                where.append(f"{col} = ?")
                args.append(value)
        if scenario:
            where.append("lower(scenario) = lower(?)")
            args.append(scenario)
        if valid:
            where.append("status = 'ok' AND (valid = 1 OR (mode = 'accuracy' AND "
                         "coalesce(accuracy_passed, 1) = 1))")
        if since:
            where.append("started >= ?")
            args.append(since)
        if kinds:
            where.append(f"kind IN ({', '.join('?' * len(kinds))})")
            args.extend(kinds)
        if under:
            where.append("(path = ? OR path LIKE ? ESCAPE '\\')")
            esc = under.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            args += [under, esc.rstrip("/") + "/%"]
        sql = f"SELECT {', '.join(_READ_COLUMNS)} FROM runs"
        sql += " WHERE " + " AND ".join(where) if where else ""
        rows = self.conn.execute(sql + " ORDER BY started, path", args).fetchall()
        return [_from_sql(r) for r in rows]

    def benchmarks(self) -> list[str]:
        """The benchmark names of the indexed runs."""
        return [r[0] for r in self.conn.execute("SELECT DISTINCT benchmark FROM runs")]

    def count(self) -> int:
        return self.conn.execute("SELECT count(*) FROM runs").fetchone()[0]


def _read_row(run_dir: Path, root: Path) -> tuple[RunRow, os.stat_result] | None:
    """The row of ``run_dir`` and its run.json's stat; a damaged row when the file cannot be
    used; None when it is gone."""
    try:
        stat = marker(run_dir).stat()
    except OSError:
        return None
    if not (run_dir / "run.json").exists():
        return endpoints_row(run_dir, root), stat
    try:
        row = row_from_run_dir(run_dir, root)
    except ValueError as exc:
        # the row names the run: its path is not repeated in the reason
        reason = str(exc).replace(str(run_dir / "run.json"), "run.json")
        reason = reason.removeprefix(f"{run_dir}: ")
        row = damaged_row(run_dir, root, reason)
    except OSError as exc:
        row = damaged_row(run_dir, root, f"unreadable run.json ({exc.strerror or exc})")
    return row, stat


#: who hears that a run could not be indexed (the CLI prints it); once per runs folder
_notice: Callable[[str], None] | None = None
_not_indexed: set[Path] = set()


def on_notice(sink: Callable[[str], None] | None) -> None:
    """Send :func:`record_run`'s one notice per runs folder to ``sink``."""
    global _notice
    _notice = sink


def record_run(run_dir: Path) -> None:
    """The runner's hook: index one run. Never fails or holds up a run: an index another
    process keeps locked for RUN_BUSY_TIMEOUT_S is skipped for the rest of this process, with
    one notice (the index can always be rebuilt).

    A run nested inside another run's directory (e.g. the LoadGen runs of a power session) is
    part of that run, as ``find_run_dirs`` sees it: it gets no index of its own.
    """
    if any((parent / "run.json").is_file() for parent in Path(run_dir).resolve().parents):
        return
    root = runs_root_of(run_dir)
    if root in _not_indexed:
        return
    try:
        with Store(root, busy_timeout=RUN_BUSY_TIMEOUT_S) as store:
            store.record(run_dir)
    except (sqlite3.Error, OSError) as exc:
        _not_indexed.add(root)
        if _notice is not None:
            _notice(f"this run is not in the index {index_path(root)} ({exc}); the run goes on, "
                    "`mlharness runs reindex` adds it later")


def open_store(root: Path, sync: bool = True) -> Store:
    """The index of ``root`` brought up to date with its run directories. When another process
    keeps it locked for RUN_BUSY_TIMEOUT_S: an index in memory read from the directories, with
    one notice (the file is left as it is)."""
    store = None
    try:
        store = Store(root, busy_timeout=RUN_BUSY_TIMEOUT_S)
        if sync and not store.rebuilt:
            store.sync()
        return store
    except sqlite3.OperationalError as exc:
        if store is not None:
            store.close()
        if not _busy(exc):
            raise
        root = Path(root).resolve()
        if _notice is not None and root not in _read_around:
            _notice(f"the index {index_path(root)} is locked by another process ({exc}); this "
                    "reads the run directories instead (slower), and leaves the index as it is")
        _read_around.add(root)
        return Store(root, in_memory=True)


#: runs folders whose locked index a reading command has read around (noticed once)
_read_around: set[Path] = set()


def locked(exc: BaseException) -> bool:
    """Whether ``exc`` says another process holds the index locked."""
    return _busy(exc)


def run_state(row: RunRow) -> str:
    """``status`` for finished runs; an unfinished one is ``running`` only while the process
    named in its run.json is alive on this host, else ``crashed``."""
    if row.status != "running":
        return row.status  # ok, failed, error, interrupted, damaged
    alive = process_alive(row.pid, row.host, row.pid_start, row.boot_id)
    return "running" if alive else "crashed"


class _Connection(sqlite3.Connection):
    """A connection that knows how often a busy statement is retried."""

    retries = 50


class _transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (rollback on error), retried while the file is busy."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        _retry(lambda: self.conn.execute("BEGIN IMMEDIATE"), _retries(self.conn))
        return self.conn

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            _retry(lambda: self.conn.execute("COMMIT"), _retries(self.conn))
        else:
            self.conn.execute("ROLLBACK")


def _retries(conn: sqlite3.Connection) -> int:
    return getattr(conn, "retries", 50)


def _busy(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc)
                                                          or "busy" in str(exc))


def _retry(fn: Any, attempts: int = 50) -> Any:
    for i in range(attempts):
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if not _busy(exc) or i == attempts - 1:
                raise
            time.sleep(0.05 * (i + 1))
    return None


def _to_sql(row: RunRow) -> dict[str, Any]:
    out = scrub_data(row.to_dict())  # secrets stay out of the index (mlharness.redact)
    for col in _JSON_COLUMNS:
        out[col] = json.dumps(out[col], sort_keys=True, default=str)
    return out


def _from_sql(row: sqlite3.Row) -> IndexedRun:
    values = dict(row)
    for col in _JSON_COLUMNS:
        values[col] = json.loads(values[col]) if values[col] else ([] if col == "reasons" else {})
    for col in _BOOL_COLUMNS:
        if values[col] is not None:
            values[col] = bool(values[col])
    run = IndexedRun(**values, state=values["status"])  # a finished run's state: its status
    run.state = run_state(run)
    if run.state == "crashed" and not run.reasons:
        run.reasons = ["left at 'running' by a process that died (crash or SIGKILL): "
                       "never finished"]
    return run
