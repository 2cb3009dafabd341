"""The result store: an SQLite index of every run directory (runs, audits, tune probes).

    from mlharness.store import open_store
    with open_store(Path("runs")) as store:
        rows = store.query(benchmark="demo", valid=True)

The runner calls :func:`record_run` when a run starts and when it ends; ``mlharness runs
reindex`` rebuilds the index from the directories, which stay the source of truth.
"""

from mlharness.store.index import (INDEX_NAME, IndexedRun, Store, find_run_dirs, open_store,
                                   record_run, run_state, runs_root_of)
from mlharness.store.row import RunRow, git_commit_of, load_run_json, row_from_run_dir

__all__ = ["INDEX_NAME", "IndexedRun", "RunRow", "Store", "find_run_dirs", "git_commit_of", "load_run_json", "open_store",
           "record_run", "row_from_run_dir", "run_state", "runs_root_of"]
