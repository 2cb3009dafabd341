"""On-disk cache of pre-processed KiTS19 cases: ``image.npy`` and ``label.npy`` per case.

Layout: ``<root>/kits19/<pre-processing fingerprint>/<k[:2]>/<k>/{image,label}.npy`` where ``k``
hashes the sha256 checksums of the case's two source files with the fingerprint (the
pre-processing version and constants), so an entry follows the data, not its path: a moved or
copied dataset (and ``case_00400``, the reference's copy of ``case_00185``) finds its entries,
and a changed file or pre-processing never reuses one. Checksums are remembered per file (path,
size, modification time) in ``<root>/kits19/checksums.json``, so a run reads each source once.

Entries are written to temporary names and renamed: an interrupted build leaves no half files.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from mlharness.errors import DatasetError
from mlharness.files import sha256_file, write_text_atomic
from mlharness.tasks.base import Progress
from mlharness.tasks.kits19.cases import CaseFiles
from mlharness.tasks.kits19.preprocessing import KITS19, Geometry, preprocess_case

IMAGE, LABEL = "image.npy", "label.npy"


@dataclass(frozen=True)
class _Job:
    imaging: str
    segmentation: str
    entry: str
    geometry: Geometry


class VolumeCache:
    """Pre-processed ``(image, label)`` volumes of KiTS19 cases, keyed by their sources' bytes."""

    def __init__(self, root: Path, geometry: Geometry = KITS19) -> None:
        self.geometry = geometry
        params = json.dumps(geometry.to_dict(), sort_keys=True)
        self.fingerprint = hashlib.sha256(params.encode()).hexdigest()[:16]
        self.base = Path(root).expanduser().absolute() / "kits19"
        self.dir = self.base / self.fingerprint
        self._memo_path = self.base / "checksums.json"
        self._memo: dict[str, dict[str, object]] | None = None

    # -- checksums ---------------------------------------------------------------------------
    def _memo_table(self) -> dict[str, dict[str, object]]:
        if self._memo is None:
            try:
                self._memo = json.loads(self._memo_path.read_text())
            except (OSError, ValueError):
                self._memo = {}
        return self._memo

    def checksum(self, path: Path) -> str:
        """The sha256 of ``path``, from the memo while its size and modification time hold."""
        try:
            st = path.stat()
        except FileNotFoundError:
            raise DatasetError(f"KiTS19 file is missing: {path}",
                               hint="re-download the case") from None
        ident = str(path.resolve())
        memo = self._memo_table()
        seen = memo.get(ident)
        if seen and seen.get("size") == st.st_size and seen.get("mtime_ns") == st.st_mtime_ns:
            return str(seen["sha256"])
        digest = sha256_file(path)
        memo[ident] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
        return digest

    def save_checksums(self) -> None:
        if self._memo is not None:
            self.base.mkdir(parents=True, exist_ok=True)
            write_text_atomic(self._memo_path, json.dumps(self._memo, indent=1, sort_keys=True))

    # -- entries -----------------------------------------------------------------------------
    def entry(self, case: CaseFiles) -> Path:
        """The folder of ``case``'s cached volumes."""
        ident = "\0".join((self.checksum(case.imaging), self.checksum(case.segmentation),
                           self.fingerprint))
        key = hashlib.sha256(ident.encode()).hexdigest()[:32]
        return self.dir / key[:2] / key

    def missing(self, cases: Sequence[CaseFiles]) -> list[int]:
        """Indices of ``cases`` without both cached volumes."""
        return [i for i, c in enumerate(cases)
                if not ((self.entry(c) / IMAGE).is_file() and (self.entry(c) / LABEL).is_file())]

    def image(self, case: CaseFiles) -> np.ndarray:
        """``case``'s pre-processed image ``(1, D, H, W)`` float32 (built on a miss)."""
        return self._load(case, IMAGE)

    def label(self, case: CaseFiles) -> np.ndarray:
        """``case``'s pre-processed label ``(1, D, H, W)`` uint8 (built on a miss)."""
        return self._load(case, LABEL)

    def image_shape(self, case: CaseFiles) -> tuple[int, ...] | None:
        """The cached image's shape, read from its header (None: not cached)."""
        try:
            return tuple(np.load(self.entry(case) / IMAGE, mmap_mode="r").shape)
        except (FileNotFoundError, ValueError, EOFError, OSError):
            return None

    def _load(self, case: CaseFiles, name: str) -> np.ndarray:
        folder = self.entry(case)
        try:
            return np.load(folder / name)
        except (FileNotFoundError, ValueError, EOFError, OSError):
            err = _build(self._job(case))
            if err:
                raise DatasetError(err, hint="re-download the case") from None
            return np.load(folder / name)

    def _job(self, case: CaseFiles) -> _Job:
        return _Job(str(case.imaging), str(case.segmentation), str(self.entry(case)),
                    self.geometry)

    def build(self, cases: Sequence[CaseFiles], progress: Progress | None = None,
              workers: int | None = None) -> int:
        """Pre-process every case without an entry; returns how many were built."""
        if progress:
            progress(0, len(cases), "KiTS19 checksums")
        todo: list[_Job] = []
        seen: set[str] = set()
        for n, case in enumerate(cases, start=1):
            folder = self.entry(case)
            if not ((folder / IMAGE).is_file() and (folder / LABEL).is_file()) \
                    and str(folder) not in seen:
                seen.add(str(folder))
                todo.append(self._job(case))
            if progress:
                progress(n, len(cases), "KiTS19 checksums")
        self.save_checksums()
        total = len(todo)
        if not total:
            return 0
        self.dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.dir / "params.json",
                          json.dumps(self.geometry.to_dict(), indent=2, sort_keys=True))
        label = "pre-processing KiTS19"
        if progress:
            progress(0, total, label)
        errors: list[str] = []
        # a large case takes a few GB while it is resampled: a few processes at most
        workers = max(1, min(workers or min(os.cpu_count() or 1, 4), total))
        if workers == 1:
            for n, job in enumerate(todo, start=1):
                if err := _build(job):
                    errors.append(err)
                if progress:
                    progress(n, total, label)
        else:
            ctx = multiprocessing.get_context("spawn")
            with ctx.Pool(workers) as pool:
                for n, err in enumerate(pool.imap_unordered(_build, todo), start=1):
                    if err:
                        errors.append(err)
                    if progress:
                        progress(n, total, label)
        if errors:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise DatasetError(f"{len(errors)} KiTS19 case(s) could not be pre-processed: "
                               f"{errors[0]}{more}", hint="re-download the damaged cases")
        return total


def _save(path: Path, array: np.ndarray) -> None:
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        np.save(fh, array, allow_pickle=False)
    os.replace(tmp, path)


def _build(job: _Job) -> str | None:
    """Pre-process one case into its entry; an error as one line (for the parent to report)."""
    try:
        image, label = preprocess_case(Path(job.imaging), Path(job.segmentation), job.geometry)
        folder = Path(job.entry)
        folder.mkdir(parents=True, exist_ok=True)
        _save(folder / LABEL, label)
        _save(folder / IMAGE, image)
    except DatasetError as exc:
        return exc.message
    except Exception as exc:  # noqa: BLE001 - reported to the parent as text
        return f"{Path(job.imaging).parent}: {type(exc).__name__}: {str(exc).splitlines()[0]}"
    return None
