"""A Hugging Face data set on disk: the files of each split, in the order ``datasets`` reads them.

Three layouts hold one, all read without ``datasets`` itself:

- **parquet** shards as the Hub stores them: ``data/<split>-00000-of-00015.parquet`` (a
  ``hf download --repo-type dataset --local-dir DIR`` copy, or a snapshot folder of the Hub
  cache ``datasets--<org>--<name>/snapshots/<commit>/``); also ``<split>/*.parquet``;
- **arrow** files as ``load_dataset`` caches them (``<cache>/<org>___<name>/default/0.0.0/
  <hash>/<name>-<split>[-00000-of-00003].arrow``, Arrow IPC streams);
- **save_to_disk** folders (``dataset_dict.json``, ``<split>/data-00000-of-00001.arrow``).

Within a split the shards are taken in name order (as ``datasets`` sorts its data files).
``pyarrow`` comes with the ``llm`` extra.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from mlharness.artefacts.errors import ArtefactError

Kind = Literal["parquet", "arrow"]
#: ``train-00000-of-00015.parquet``, ``train-00000-of-00002-1a2b3c4d.parquet``, ``test.parquet``
_PARQUET_NAME = re.compile(r"^(?P<split>[A-Za-z][A-Za-z0-9_]*?)(?:[-.]\d{5}-of-\d{5}(?:-[0-9a-f]+)?)?"
                           r"(?:-[0-9a-f]{8,})?\.parquet$")
#: ``product-catalogue-train-00000-of-00003.arrow`` (the datasets cache)
_CACHE_ARROW = re.compile(r"-(?P<split>train|test|validation)(?:-\d{5}-of-\d{5})?\.arrow$")
#: ``data-00000-of-00001.arrow`` (save_to_disk: the split is the folder's name)
_SAVED_ARROW = re.compile(r"^data-\d{5}-of-\d{5}\.arrow$")


def load_pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.ipc  # noqa: F401 - the submodules used below
        import pyarrow.parquet  # noqa: F401
    except ImportError as exc:
        raise ArtefactError("reading a Hugging Face data set needs pyarrow",
                            hint="pip install 'mlharness[llm]'") from exc
    return pyarrow


@dataclass(frozen=True)
class Shard:
    """One file of one split."""

    path: Path
    split: str
    kind: Kind

    def rows(self) -> int:
        """Its number of rows (parquet: from the footer; arrow: the batches' lengths)."""
        pa = load_pyarrow()
        try:
            if self.kind == "parquet":
                return int(pa.parquet.ParquetFile(self.path).metadata.num_rows)
            with pa.memory_map(str(self.path)) as source:
                return sum(batch.num_rows for batch in pa.ipc.open_stream(source))
        except (OSError, pa.ArrowInvalid) as exc:
            raise ArtefactError(f"{self.path} is not a readable {self.kind} file ({exc})",
                                hint="the copy is damaged or incomplete; fetch it again") from exc

    def schema_names(self) -> list[str]:
        """The column names it holds."""
        pa = load_pyarrow()
        try:
            if self.kind == "parquet":
                return list(pa.parquet.ParquetFile(self.path).schema_arrow.names)
            with pa.memory_map(str(self.path)) as source:
                return list(pa.ipc.open_stream(source).schema.names)
        except (OSError, pa.ArrowInvalid) as exc:
            raise ArtefactError(f"{self.path} is not a readable {self.kind} file ({exc})",
                                hint="the copy is damaged or incomplete; fetch it again") from exc


@dataclass(frozen=True)
class HfLayout:
    """The shards of the splits asked for, split by split in the order asked."""

    root: Path
    kind: Kind
    shards: list[Shard] = field(default_factory=list)

    @property
    def splits(self) -> list[str]:
        return list(dict.fromkeys(s.split for s in self.shards))

    def rows(self) -> int:
        return sum(s.rows() for s in self.shards)


def _parquet_split(path: Path, wanted: tuple[str, ...]) -> str | None:
    if path.parent.name in wanted:
        return path.parent.name
    m = _PARQUET_NAME.match(path.name)
    return m.group("split") if m and m.group("split") in wanted else None


def _arrow_split(path: Path, wanted: tuple[str, ...]) -> str | None:
    if _SAVED_ARROW.match(path.name):
        return path.parent.name if path.parent.name in wanted else None
    m = _CACHE_ARROW.search(path.name)
    return m.group("split") if m and m.group("split") in wanted else None


def _one_folder(shards: list[Shard], root: Path, kind: Kind) -> list[Shard]:
    """Refuse two copies of one split (two cached versions, two snapshots): name them."""
    for split in dict.fromkeys(s.split for s in shards):
        parents = sorted({s.path.parent if s.path.parent.name != split else s.path.parent.parent
                          for s in shards if s.split == split})
        if len(parents) > 1:
            shown = ", ".join(str(p.relative_to(root)) for p in parents[:3])
            raise ArtefactError(f"{root} holds {len(parents)} copies of the {split!r} {kind} "
                                f"files ({shown})",
                                hint="give the one folder to use (a snapshot or cache version)")
    return shards


def find(root: Path, splits: tuple[str, ...]) -> HfLayout:
    """The shards of ``splits`` (those present, in that order) under ``root``; parquet first,
    then arrow. An ArtefactError when neither holds the first split, which must be there."""
    root = Path(root)
    if not root.is_dir():
        raise ArtefactError(f"{root} is not a folder",
                            hint="give the folder of the Hugging Face data set (its parquet files, "
                            "or the datasets cache that load_dataset wrote)")
    kinds: list[tuple[Kind, str, Callable[[Path, tuple[str, ...]], str | None]]] = [
        ("parquet", "*.parquet", _parquet_split), ("arrow", "*.arrow", _arrow_split)]
    for kind, pattern, split_of in kinds:
        found = [Shard(p, split, kind) for p in sorted(root.rglob(pattern))
                 if (split := split_of(p, splits)) is not None and ".cache" not in p.parts]
        if found:
            found = _one_folder(found, root, kind)
            ordered = [s for split in splits for s in sorted(
                (s for s in found if s.split == split), key=lambda s: s.path.name)]
            if not any(s.split == splits[0] for s in ordered):
                raise ArtefactError(f"{root} holds {kind} files but no {splits[0]!r} split",
                                    hint="give the whole data set (its "
                                    + " and ".join(repr(s) for s in splits) + " splits)")
            return HfLayout(root, kind, ordered)
    raise ArtefactError(f"{root} holds no parquet or arrow file of the "
                        + " or ".join(repr(s) for s in splits) + " split",
                        hint="download it with `hf download --repo-type dataset NAME "
                        "--local-dir DIR` (parquet), or give the datasets cache folder")
