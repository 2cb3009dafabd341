"""The QSL side every image task shares: a list of image files, pre-processed when loaded.

Subclasses read their dataset's list (``val_map.txt``, COCO annotations), say where image ``i``
is (``image_path``) and how many there are (``total_count``); they add response encoding and
scoring. Loading goes through the on-disk sample cache when there is one.
"""

from __future__ import annotations

from abc import abstractmethod
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Sequence

import numpy as np

from mlharness.artefacts.cache import read_stamp
from mlharness.errors import DatasetError
from mlharness.tasks.base import Progress, TensorSpec, TensorTask
from mlharness.tasks.vision.cache import SampleCache

Preprocess = Callable[[Path], np.ndarray]


def confined(name: str, where: str) -> str:
    """``name`` from a dataset's image list, refused unless it stays inside the dataset folder
    (relative, no ``..``): a list must not make the harness read files elsewhere."""
    pure = PurePosixPath(name.replace("\\", "/"))
    if not name or pure.is_absolute() or ".." in pure.parts or Path(name).is_absolute():
        raise DatasetError(f"{where}: {name!r} points outside the dataset folder",
                           hint="image paths must be relative to the dataset folder, without '..'")
    return name


def allowed_roots(dataset_dir: Path) -> list[Path]:
    """Where a dataset's images may really be: the folder itself, and for a folder of links that
    ``mlharness get --from DIR`` made, DIR (its stamp names it)."""
    roots = [dataset_dir.resolve()]
    source = str((read_stamp(dataset_dir) or {}).get("source", ""))
    if source.startswith("--from "):
        roots.append(Path(source[len("--from "):]).resolve())
    return roots


def outside(paths: Sequence[Path], dataset_dir: Path) -> list[Path]:
    """The ``paths`` that resolve (through symbolic links) outside the dataset folder."""
    roots = allowed_roots(dataset_dir)
    return [p for p in paths
            if not any(p.resolve().is_relative_to(root) for root in roots)]


class ImageSetTask(TensorTask):
    #: the file that lists the images, named in error messages
    list_name = "the image list"
    #: how to repair a dataset with missing images
    missing_hint = "re-extract the dataset"

    def __init__(self, name: str, loadgen_model: str, dataset_dir: Path, preprocess: Preprocess,
                 input_spec: TensorSpec, target: float | None,
                 performance_count: int | None = None, cache: SampleCache | None = None,
                 prepare_workers: int | None = None) -> None:
        self.name = name
        self.loadgen_model = loadgen_model
        self.dataset_dir = dataset_dir
        self.preprocess = preprocess
        self.input_spec = input_spec
        self.target = target
        total = self.total_count()
        self._performance_count = min(performance_count or total, total)
        self.cache = cache
        self.prepare_workers = prepare_workers
        self._loaded: dict[int, np.ndarray] = {}

    @abstractmethod
    def image_path(self, index: int) -> Path:
        """Where sample ``index`` is on disk."""

    @property
    def model_inputs(self) -> list[TensorSpec]:
        return [self.input_spec]

    def performance_count(self) -> int:
        return self._performance_count

    def prepare(self, progress: Progress | None = None) -> None:
        """Check every listed image exists; fill the pre-processed sample cache (if any)."""
        # distinct files only: a list may name the same image many times
        paths = list(dict.fromkeys(self.image_path(i) for i in range(self.total_count())))
        missing = [p for p in paths if not p.is_file()]
        if missing:
            raise DatasetError(
                f"{len(missing)} image(s) listed in {self.list_name} are missing, "
                f"e.g. {missing[0]}", hint=self.missing_hint)
        escaping = outside(paths, self.dataset_dir)
        if escaping:
            raise DatasetError(
                f"{len(escaping)} image(s) listed in {self.list_name} are links that leave the "
                f"dataset folder, e.g. {escaping[0]} -> {escaping[0].resolve()}",
                hint="copy the images into the dataset folder (or adopt the folder with "
                     "mlharness get --from)")
        if self.cache is not None:
            self.cache.build(paths, progress, self.prepare_workers, label="pre-processing images")

    def load_samples(self, indices: Sequence[int]) -> None:
        # prepare() (run before LoadGen starts) has already checked that every file exists
        for i in indices:
            if i not in self._loaded:
                path = self.image_path(i)
                self._loaded[i] = self.cache.load(path) if self.cache else self.preprocess(path)

    def unload_samples(self, indices: Sequence[int]) -> None:
        for i in indices:
            self._loaded.pop(i, None)

    def batch_inputs(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
        return {self.input_spec.name: np.stack([self._loaded[i] for i in indices])}

    def describe(self) -> dict[str, Any]:
        out = {**super().describe(), "dataset": str(self.dataset_dir),
               "samples": self.total_count()}
        config = getattr(self.preprocess, "config", None)
        if config is not None:
            out["preprocessing"] = config.to_dict()
        if self.cache is not None:
            out["cache"] = str(self.cache.dir)
        return out
