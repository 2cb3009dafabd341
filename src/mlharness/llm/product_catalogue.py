"""The Shopify product catalogue, qwen3-vl-235b-a22b's data set, read from its Hugging Face
layout on disk (:mod:`mlharness.artefacts.hf_layout`: parquet shards or ``datasets``' arrow cache).

The reference (``endpoints`` ``dataset_manager/predefined/shopify_product_catalogue``, and
before it ``multimodal/qwen3-vl/.../task.py``) loads ``Shopify/product-catalogue`` with
``load_dataset(..., split="train+test")``: the two splits concatenated in that order, 48,289
samples; the Interactive scenario's ``nvidia/Shopify-product-catalogue-8k`` has ``train``
only. Each row holds the product's title, description, candidate categories, image
(``{"bytes", "path"}``, the ``datasets`` Image feature) and the ground truth (category path,
brand, second-hand flag) that :mod:`mlharness.llm.hierarchical_f1` scores against.

The text columns are read once; the images stay in their files until asked for, a row group
(parquet) or a memory-mapped stream (arrow) at a time.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from mlharness.artefacts.errors import ArtefactError
from mlharness.artefacts.hf_layout import HfLayout, Shard, load_pyarrow, find
from mlharness.errors import DatasetError

#: the splits the reference concatenates, in order (the 8k set has the first only)
SPLITS = ("train", "test")
IMAGE = "product_image"
#: the columns the request and the scorer read (besides the image)
TEXT_COLUMNS = ("product_title", "product_description", "potential_product_categories",
                "ground_truth_category", "ground_truth_brand", "ground_truth_is_secondhand")


@dataclass(frozen=True)
class Product:
    """One sample's text and ground truth (a missing title or description stays None; the
    request writes it as the reference does, ``product_request.MISSING_TEXT``)."""

    title: str | None
    description: str | None
    categories: list[str]
    category: str
    brand: str
    secondhand: bool


@dataclass
class _Images:
    """The image column of one shard, read on demand."""

    shard: Shard
    offset: int  # the shard's first row in the whole catalogue
    rows: int
    _file: Any = None  # parquet: the open ParquetFile; arrow: the memory-mapped table
    _group_starts: list[int] | None = None
    _group: tuple[int, list[Any]] | None = None  # (row group, its images) last read

    def get(self, row: int) -> dict[str, Any]:
        pa = load_pyarrow()
        if self.shard.kind == "arrow":
            if self._file is None:
                with pa.memory_map(str(self.shard.path)) as source:
                    self._file = pa.ipc.open_stream(source).read_all().column(IMAGE)
            return self._file[row].as_py()
        if self._file is None:
            self._file = pa.parquet.ParquetFile(self.shard.path)
            starts, at = [], 0
            for g in range(self._file.num_row_groups):
                starts.append(at)
                at += self._file.metadata.row_group(g).num_rows
            self._group_starts = starts
        assert self._group_starts is not None
        group = bisect.bisect_right(self._group_starts, row) - 1
        if self._group is None or self._group[0] != group:
            column = self._file.read_row_group(group, columns=[IMAGE]).column(IMAGE)
            self._group = (group, column.to_pylist())
        return self._group[1][row - self._group_starts[group]]

    def close(self) -> None:
        self._file, self._group = None, None


class Catalogue:
    """The samples of one catalogue folder: their text (``products``) and their images."""

    def __init__(self, root: Path, splits: tuple[str, ...] = SPLITS) -> None:
        try:
            self.layout: HfLayout = find(root, splits)
        except ArtefactError as exc:
            raise DatasetError(exc.message, exc.hint) from exc
        self.root = Path(root)
        self.products: list[Product] = []
        self._images: list[_Images] = []
        self._starts: list[int] = []
        for shard in self.layout.shards:
            rows = self._read_text(shard)
            self._starts.append(len(self.products) - len(rows))
            self._images.append(_Images(shard, self._starts[-1], len(rows)))

    def __len__(self) -> int:
        return len(self.products)

    @property
    def splits(self) -> list[str]:
        return self.layout.splits

    def _read_text(self, shard: Shard) -> list[Product]:
        pa = load_pyarrow()
        names = shard.schema_names()
        missing = [c for c in (*TEXT_COLUMNS, IMAGE) if c not in names]
        if missing:
            raise DatasetError(f"{shard.path} lacks the column(s) {', '.join(missing)}: not the "
                               "Shopify product catalogue (columns: " + ", ".join(names) + ")",
                               "give the Shopify/product-catalogue data set (or its 8k subset)")
        try:
            if shard.kind == "parquet":
                table = pa.parquet.read_table(shard.path, columns=list(TEXT_COLUMNS))
            else:
                with pa.memory_map(str(shard.path)) as source:
                    table = pa.ipc.open_stream(source).read_all().select(list(TEXT_COLUMNS))
        except (OSError, pa.ArrowInvalid) as exc:
            raise DatasetError(f"{shard.path} cannot be read ({exc})",
                               "the copy is damaged or incomplete; fetch it again") from exc
        columns = {c: table.column(c).to_pylist() for c in TEXT_COLUMNS}
        rows = []
        for i in range(table.num_rows):
            try:
                rows.append(_product(columns, i))
            except (TypeError, ValueError) as exc:
                raise DatasetError(f"{shard.path} row {i}: {exc}",
                                   "the Shopify product catalogue has text, a list of "
                                   "categories and a bool in these columns") from exc
        self.products.extend(rows)
        return rows

    def image(self, index: int) -> bytes:
        """The stored bytes of sample ``index``'s image (the file as the data set holds it)."""
        part = bisect.bisect_right(self._starts, index) - 1
        images = self._images[part]
        value = images.get(index - images.offset)
        data = value.get("bytes") if isinstance(value, dict) else None
        if data is None and isinstance(value, dict) and value.get("path"):
            path = Path(value["path"])
            path = path if path.is_absolute() else self.root / path
            if path.is_file():
                return path.read_bytes()
        if not data:
            raise DatasetError(f"sample {index} of {self.root} has no image bytes",
                               "the data set is incomplete; fetch it again")
        return bytes(data)

    def images(self, indices: Sequence[int]) -> dict[int, bytes]:
        """The images of ``indices``, read in file order (each row group once)."""
        return {i: self.image(i) for i in sorted(set(indices))}

    def release(self) -> None:
        """Forget the row group and streams held open (their memory goes back)."""
        for images in self._images:
            images.close()


def _product(columns: dict[str, list[Any]], i: int) -> Product:
    categories = columns["potential_product_categories"][i]
    if not isinstance(categories, list) or not all(isinstance(c, str) for c in categories):
        raise TypeError(f"potential_product_categories is {type(categories).__name__}, "
                        "not a list of text")
    secondhand = columns["ground_truth_is_secondhand"][i]
    if not isinstance(secondhand, bool):
        raise TypeError(f"ground_truth_is_secondhand is {secondhand!r}, not a bool")
    category, brand = columns["ground_truth_category"][i], columns["ground_truth_brand"][i]
    if not isinstance(category, str) or not isinstance(brand, str):
        raise TypeError("ground_truth_category and ground_truth_brand must be text")
    title, description = columns["product_title"][i], columns["product_description"][i]
    return Product(title=None if title is None else str(title),
                   description=None if description is None else str(description),
                   categories=categories, category=category, brand=brand,
                   secondhand=secondhand)
