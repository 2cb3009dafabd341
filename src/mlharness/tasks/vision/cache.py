"""On-disk cache of pre-processed samples (one ``.npy`` per image), built in parallel.

Layout: ``<root>/vision/<pre-processing fingerprint>/<k[:2]>/<k>.npy`` where ``k`` hashes the
source file (absolute path, size, modification time) together with the fingerprint, so a cache
entry is reused by every run, subset (``--max-samples``) and task that reads the same image with
the same pre-processing, and is never reused after the image or the pre-processing changes.
``params.json`` next to the entries records the pre-processing for people reading the cache.

Entries are written to a temporary name and renamed, so an interrupted build leaves no half
files. Building uses a process pool (``spawn``: safe when the parent already runs threads).
"""

from __future__ import annotations

import hashlib
import io
import json
import multiprocessing
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np

from mlharness.files import cache_root
from mlharness.errors import DatasetError
from mlharness.tasks.base import Progress

#: the default cache root when TaskOptions.cache_dir is not given

#: below this many missing entries the cache is built in-process (spawning costs ~1 s)
_POOL_THRESHOLD = 32


@dataclass(frozen=True)
class _Layout:
    """A ``.npy`` entry's header bytes and what they say."""

    head: bytes
    size: int  # the whole file's
    dtype: np.dtype
    shape: tuple[int, ...]


class Preprocessor(Protocol):
    """What the cache needs: a picklable ``path -> array`` with a ``fingerprint``."""

    @property
    def fingerprint(self) -> str: ...

    def __call__(self, path: Path) -> np.ndarray: ...


def default_root(cache_dir: Path | None) -> Path:
    """The sample cache's root: ``--cache-dir`` or the shared cache root."""
    return cache_root(cache_dir)


class SampleCache:
    """Pre-processed arrays for image files, keyed by source file + pre-processing."""

    def __init__(self, root: Path, preprocess: Preprocessor, describe: dict | None = None) -> None:
        self.preprocess = preprocess
        # once: a key is computed for every sample LoadGen loads (50,000 in an accuracy run)
        self.fingerprint = preprocess.fingerprint
        self.dir = Path(root).expanduser().absolute() / "vision" / self.fingerprint
        self._describe = describe or {}
        self._layout: _Layout | None = None  # the header the entries read so far had

    def key(self, source: Path) -> str:
        """Hash of the source file's identity and the pre-processing fingerprint."""
        try:
            st = source.stat()
        except FileNotFoundError:
            raise DatasetError(f"image is missing: {source}",
                               hint="re-extract the dataset or fix its image list") from None
        ident = f"{source.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0{self.fingerprint}"
        return hashlib.sha256(ident.encode()).hexdigest()[:32]

    def entry(self, source: Path) -> Path:
        k = self.key(source)
        return self.dir / k[:2] / f"{k}.npy"

    def missing(self, sources: Sequence[Path]) -> list[int]:
        """Indices of ``sources`` without a cache entry."""
        return [i for i, s in enumerate(sources) if not self.entry(s).is_file()]

    def load(self, source: Path) -> np.ndarray:
        """The cached array for ``source``, computing and storing it on a miss."""
        path = self.entry(source)
        try:
            return self._read(path)
        except (FileNotFoundError, ValueError, EOFError, OSError):
            array = self.preprocess(source)
            _save(path, array)
            return array

    def _read(self, path: Path) -> np.ndarray:
        """One entry: its bytes read at once; when its header is the one the last entry had
        (every entry of one pre-processing has the same shape and dtype), the array is a view of
        them, else ``np.load`` parses it (a ``.npy`` header is a Python literal: ``np.load``
        took about 75 us a sample more than this, three times a small sample's read)."""
        with open(path, "rb") as fh:
            data = bytearray(os.fstat(fh.fileno()).st_size)
            if fh.readinto(data) != len(data):
                raise EOFError(f"{path} was cut short")
        known = self._layout
        if known is not None and len(data) == known.size and data.startswith(known.head):
            return np.frombuffer(data, known.dtype, offset=len(known.head)).reshape(known.shape)
        array = np.load(io.BytesIO(data), allow_pickle=False)
        if array.dtype.hasobject or not array.flags.c_contiguous:
            return array
        head = len(data) - array.nbytes
        self._layout = _Layout(bytes(data[:head]), len(data), array.dtype, array.shape)
        return array

    def build(self, sources: Sequence[Path], progress: Progress | None = None,
              workers: int | None = None, label: str = "pre-processing") -> int:
        """Create every missing entry; returns how many were built."""
        todo = [(str(sources[i]), str(self.entry(sources[i]))) for i in self.missing(sources)]
        total = len(todo)
        report: Callable[[int], None] = (lambda n: progress(n, total, label)) if progress else (
            lambda n: None)
        if not total:
            return 0
        self._write_params()
        report(0)
        workers = max(1, min(workers or os.cpu_count() or 1, total))
        errors: list[str] = []
        if workers == 1 or total < _POOL_THRESHOLD:
            for n, job in enumerate(todo, start=1):
                err = _build_one(self.preprocess, job)
                if err:
                    errors.append(err)
                report(n)
        else:
            ctx = multiprocessing.get_context("spawn")
            chunk = max(1, min(16, total // (workers * 8)))
            with ctx.Pool(workers, initializer=_init_worker, initargs=(self.preprocess,)) as pool:
                results = pool.imap_unordered(_build_in_worker, todo, chunk)
                for n, err in enumerate(results, start=1):
                    if err:
                        errors.append(err)
                    report(n)
        if errors:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise DatasetError(f"{len(errors)} image(s) could not be pre-processed: "
                               f"{errors[0]}{more}",
                               hint="remove or replace the unreadable files, or fix the image list")
        return total

    def _write_params(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        params = self.dir / "params.json"
        if not params.exists():
            tmp = params.with_name(f".params.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self._describe, indent=2, sort_keys=True))
            os.replace(tmp, params)


def _save(path: Path, array: np.ndarray) -> None:
    """Write ``array`` to ``path`` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        np.save(fh, array, allow_pickle=False)
    os.replace(tmp, path)


def _build_one(preprocess: Preprocessor, job: tuple[str, str]) -> str | None:
    source, dest = job
    try:
        _save(Path(dest), preprocess(Path(source)))
    except Exception as exc:  # noqa: BLE001 - reported to the parent as text
        return f"{source}: {str(exc).splitlines()[0]}"
    return None


_WORKER_PREPROCESS: Preprocessor | None = None


def _init_worker(preprocess: Preprocessor) -> None:
    global _WORKER_PREPROCESS
    _WORKER_PREPROCESS = preprocess
    try:  # one OpenCV thread per worker process: the pool already uses every core
        import cv2

        cv2.setNumThreads(1)
    except ImportError:  # pragma: no cover
        pass


def _build_in_worker(job: tuple[str, str]) -> str | None:
    assert _WORKER_PREPROCESS is not None
    return _build_one(_WORKER_PREPROCESS, job)
