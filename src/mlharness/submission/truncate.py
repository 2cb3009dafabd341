"""Accuracy-log truncation as ``tools/submission/truncate_accuracy_log.py`` does it.

Append ``\\nhash=<sha256 of the whole json>\\n`` to ``accuracy.txt``, then keep the first and last
4096 bytes of ``mlperf_log_accuracy.json`` joined by ``\\n\\n...\\n\\n`` (files under 4096 bytes
keep their content). Run only after compliance verification: TEST01 needs the full log.
"""

from __future__ import annotations

import re
from pathlib import Path

from mlharness.files import sha256_file, write_bytes_atomic

KEEP = 4096
LIMIT = 10 * 1024
_HASH = re.compile(r"^hash=([\w\d]+)$", re.M)


def is_truncated(acc_dir: Path) -> bool:
    """Already hashed and small enough (the official tool then leaves it alone)."""
    log, txt = acc_dir / "mlperf_log_accuracy.json", acc_dir / "accuracy.txt"
    return (txt.is_file() and bool(_HASH.search(txt.read_text(errors="replace")))
            and log.is_file() and log.stat().st_size < LIMIT)


def truncate_dir(acc_dir: Path, keep: int = KEEP) -> str | None:
    """Hash and truncate ``acc_dir/mlperf_log_accuracy.json``; returns the hash, or None if the
    directory was already done. ``accuracy.txt`` must exist (an empty one for TEST01)."""
    log, txt = acc_dir / "mlperf_log_accuracy.json", acc_dir / "accuracy.txt"
    if not log.is_file():
        raise FileNotFoundError(log)
    if not txt.is_file():
        raise FileNotFoundError(txt)
    if is_truncated(acc_dir):
        return None
    digest = sha256_file(log)
    write_bytes_atomic(txt, txt.read_bytes() + f"\nhash={digest}\n".encode())
    data = log.read_bytes()
    if len(data) >= keep:
        write_bytes_atomic(log, data[:keep] + b"\n\n...\n\n" + data[-keep:])
    return digest
