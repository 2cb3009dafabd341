"""The on-disk pre-processed sample cache: keys, reuse, invalidation, parallel build, errors."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mlharness.errors import DatasetError
from mlharness.tasks.vision import preprocessing as pp
from mlharness.tasks.vision.cache import SampleCache

SMALL = pp.ImagePreprocessing(name="tiny", height=16, width=16, interpolation="linear")


def images(root: Path, count: int, size: int = 40) -> list[Path]:
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = root / f"{i:03d}.png"
        Image.fromarray(rng.integers(0, 256, (size, size + i % 7, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


def test_build_once_then_reuse(tmp_path: Path) -> None:
    paths = images(tmp_path / "img", 5)
    cache = SampleCache(tmp_path / "cache", pp.ImagePreprocessor(SMALL), {"p": 1})
    calls: list[tuple[int, int, str]] = []
    assert cache.build(paths, lambda d, t, label: calls.append((d, t, label))) == 5
    assert calls[0][:2] == (0, 5) and calls[-1][:2] == (5, 5)
    assert (cache.dir / "params.json").is_file()
    assert len(list(cache.dir.rglob("*.npy"))) == 5
    again = SampleCache(tmp_path / "cache", pp.ImagePreprocessor(SMALL))
    assert again.missing(paths) == []
    assert again.build(paths) == 0
    np.testing.assert_array_equal(again.load(paths[2]), pp.ImagePreprocessor(SMALL)(paths[2]))


def test_changed_source_or_parameters_miss(tmp_path: Path) -> None:
    paths = images(tmp_path / "img", 3)
    cache = SampleCache(tmp_path / "cache", pp.ImagePreprocessor(SMALL))
    cache.build(paths)
    st = paths[1].stat()
    os.utime(paths[1], ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert cache.missing(paths) == [1]
    other = pp.ImagePreprocessor(pp.resolve({"interpolation": "area"}, SMALL))
    assert SampleCache(tmp_path / "cache", other).missing(paths) == [0, 1, 2]


def test_load_on_a_miss_computes_and_stores(tmp_path: Path) -> None:
    paths = images(tmp_path / "img", 1)
    cache = SampleCache(tmp_path / "cache", pp.ImagePreprocessor(SMALL))
    array = cache.load(paths[0])
    assert array.shape == (3, 16, 16)
    assert cache.missing(paths) == []


def test_parallel_build_equals_serial(tmp_path: Path) -> None:
    paths = images(tmp_path / "img", 40, size=24)  # >= the pool threshold
    cache = SampleCache(tmp_path / "par", pp.ImagePreprocessor(SMALL))
    assert cache.build(paths, workers=2) == 40
    serial = pp.ImagePreprocessor(SMALL)
    for p in paths[::7]:
        np.testing.assert_array_equal(cache.load(p), serial(p))


def test_unreadable_images_are_reported(tmp_path: Path) -> None:
    paths = images(tmp_path / "img", 2)
    paths[1].write_bytes(b"garbage")
    cache = SampleCache(tmp_path / "cache", pp.ImagePreprocessor(SMALL))
    with pytest.raises(DatasetError, match="could not be pre-processed"):
        cache.build(paths)
    assert cache.missing(paths) == [1]  # the good one was kept
    with pytest.raises(DatasetError, match="missing"):
        cache.missing([tmp_path / "img" / "nope.png"])


def test_entries_read_by_their_shared_header_equal_what_np_load_reads(tmp_path: Path) -> None:
    """After the first entry, the others of its layout are views of their bytes: the same
    values, dtype and shape as ``np.load``'s, writable; an entry of another layout or a cut
    one is not mistaken for it."""
    paths = images(tmp_path / "img", 6)
    cache = SampleCache(tmp_path / "cache", pp.ImagePreprocessor(SMALL))
    cache.build(paths)
    for p in paths:
        array, expected = cache.load(p), np.load(cache.entry(p))
        assert array.dtype == expected.dtype and array.shape == expected.shape
        np.testing.assert_array_equal(array, expected)
        assert array.flags.writeable
    # an entry of another shape (same dtype) read after them: parsed, not viewed
    other = np.arange(2 * 8 * 8, dtype=np.float32).reshape(2, 8, 8)
    np.save(cache.entry(paths[3]), other)
    np.testing.assert_array_equal(cache.load(paths[3]), other)
    np.testing.assert_array_equal(cache.load(paths[4]), np.load(cache.entry(paths[4])))
    # a cut entry is computed again from its image
    entry = cache.entry(paths[5])
    entry.write_bytes(entry.read_bytes()[:-10])
    np.testing.assert_array_equal(cache.load(paths[5]), pp.ImagePreprocessor(SMALL)(paths[5]))
    np.testing.assert_array_equal(np.load(entry), pp.ImagePreprocessor(SMALL)(paths[5]))
