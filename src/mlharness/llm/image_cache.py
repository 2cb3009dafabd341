"""qwen3-vl's pictures as the reference sends them, kept on disk between runs.

Decoding and saving again each picture (:func:`~mlharness.llm.product_request.reference_image`)
takes about 10 ms an 800x800 JPEG here: minutes for the 48,289 of the catalogue, which every
run would spend again when LoadGen loads its samples. The reference client does it once and
keeps the result (its parquet of base64 pictures); so does this cache: one Arrow IPC file of the
``image_url`` strings, sample by sample, under ``<cache>/qwen3-vl/``, named by what decides its
bytes (the catalogue's files, their sizes and times, the sample count, Pillow's version). The
run's parent builds it with progress (``Task.prepare``); the run reads it memory-mapped.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from mlharness.artefacts.hf_layout import load_pyarrow
from mlharness.llm import product_request
from mlharness.llm.product_catalogue import Catalogue

#: a change to how the pictures are made (product_request) renames every cache file
FORMAT = "1"
CHUNK = 256
Progress = Callable[[int, int, str], None]


def cache_path(catalogue: Catalogue, count: int, root: Path) -> Path:
    """Where the cache of ``catalogue``'s first ``count`` samples lies under ``root``."""
    from PIL import __version__ as pillow  # lazy: Pillow loads with the pictures

    h = hashlib.sha256(f"{FORMAT}|{pillow}|{count}".encode())
    for shard in catalogue.layout.shards:
        stat = shard.path.stat()
        h.update(f"|{shard.path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    return root / "qwen3-vl" / f"images-{h.hexdigest()[:20]}.arrow"


def build(catalogue: Catalogue, count: int, path: Path, threads: int,
          progress: Progress | None = None) -> Path:
    """Write the cache of the first ``count`` samples to ``path`` (atomically; kept if it is
    there already)."""
    if path.is_file():
        return path
    pa = load_pyarrow()
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    schema = pa.schema([("url", pa.large_string())])
    try:
        with pa.OSFile(str(part), "wb") as sink, pa.ipc.new_file(sink, schema) as writer, \
                ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            for at in range(0, count, CHUNK):
                images = catalogue.images(range(at, min(count, at + CHUNK)))
                urls = list(pool.map(_url, [images[i] for i in sorted(images)]))
                writer.write_batch(pa.record_batch([pa.array(urls, pa.large_string())],
                                                   schema=schema))
                if progress is not None:
                    progress(min(count, at + CHUNK), count, "pictures as the reference sends")
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)
        catalogue.release()
    return path


def _url(data: bytes) -> str:
    image, fmt = product_request.reference_image(data)
    return product_request.image_url(image, fmt)


def open_urls(path: Path) -> Any:
    """The cache's ``url`` column, memory-mapped (``column[i].as_py()`` is sample ``i``'s)."""
    pa = load_pyarrow()
    source = pa.memory_map(str(path))  # left open: the column's buffers are its pages
    return pa.ipc.open_file(source).read_all().column("url")
