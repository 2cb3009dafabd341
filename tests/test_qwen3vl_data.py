"""qwen3-vl-235b-a22b's building blocks: the catalogue read from its Hugging Face layouts, the
requests built as the official endpoints client builds them, and the hierarchical F1 equal to
the official evaluation.py, both official pieces run unmodified in their own Python 3.12."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import endpoints_referee
import synthetic_catalogue as sc
from mlharness.errors import DatasetError
from mlharness.llm import hierarchical_f1 as hf1
from mlharness.llm import product_request as pr
from mlharness.llm.product_catalogue import Catalogue


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[sc.Row]]:
    root = tmp_path_factory.mktemp("catalogue")
    return root, sc.write(root)


def _same(cat: Catalogue, rows: list[sc.Row]) -> None:
    assert len(cat) == len(rows)
    for i, (p, r) in enumerate(zip(cat.products, rows)):
        assert (p.title, p.description, p.categories, p.category, p.brand, p.secondhand) == \
            (r.title, r.description, r.categories, r.category, r.brand, r.secondhand), i
    assert cat.images([5, 0, 17, 3]) == {i: rows[i].image for i in (0, 3, 5, 17)}


def test_parquet_layout_in_reference_order(catalogue: tuple[Path, list[sc.Row]]) -> None:
    root, rows = catalogue
    cat = Catalogue(root)
    assert cat.splits == ["train", "test"] and cat.layout.kind == "parquet"
    _same(cat, rows)
    assert Catalogue(root, ("train",)).products == cat.products[:13]  # the 8k set: train only


def _arrow(tables: list[pa.Table], paths: list[Path]) -> None:
    for table, path in zip(tables, paths):
        path.parent.mkdir(parents=True, exist_ok=True)
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table, max_chunksize=3)


def _tables(root: Path) -> dict[str, pa.Table]:
    return {split: pa.concat_tables([pq.read_table(p) for p in
                                     sorted((root / "data").glob(f"{split}-*.parquet"))])
            for split in ("train", "test")}


def test_arrow_layouts_read_the_same(catalogue: tuple[Path, list[sc.Row]],
                                     tmp_path: Path) -> None:
    root, rows = catalogue
    tables = _tables(root)
    cache = tmp_path / "cache" / "Shopify___product-catalogue" / "default" / "0.0.0" / "abc"
    train = tables["train"]
    _arrow([train.slice(0, 8), train.slice(8), tables["test"]],
           [cache / "product-catalogue-train-00000-of-00002.arrow",
            cache / "product-catalogue-train-00001-of-00002.arrow",
            cache / "product-catalogue-test.arrow"])
    cat = Catalogue(tmp_path / "cache")
    assert cat.layout.kind == "arrow"
    _same(cat, rows)
    saved = tmp_path / "saved"
    _arrow([train, tables["test"]], [saved / "train" / "data-00000-of-00001.arrow",
                                     saved / "test" / "data-00000-of-00001.arrow"])
    _same(Catalogue(saved), rows)
    # a second cached version of the same split: ambiguous, refused with both named
    _arrow([train], [tmp_path / "cache" / "Shopify___product-catalogue" / "default" / "0.0.0"
                     / "def" / "product-catalogue-train.arrow"])
    with pytest.raises(DatasetError, match="2 copies of the 'train' arrow files"):
        Catalogue(tmp_path / "cache")


def test_not_the_catalogue(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="holds no parquet or arrow file"):
        Catalogue(tmp_path)
    pq.write_table(pa.table({"text": ["a"]}), tmp_path / "train-00000-of-00001.parquet")
    with pytest.raises(DatasetError, match="lacks the column.*product_title"):
        Catalogue(tmp_path)
    (tmp_path / "train-00000-of-00001.parquet").unlink()
    pq.write_table(pa.table({"text": ["a"]}), tmp_path / "test-00000-of-00001.parquet")
    with pytest.raises(DatasetError, match="no 'train' split"):
        Catalogue(tmp_path)


def test_hierarchical_f1_units() -> None:
    assert hf1.path_components("A > B > C", "A > B > D") == (2, 3, 3)
    assert hf1.path_components(" A >  B ", "A > B") == (2, 2, 2)  # each level stripped
    assert hf1.path_components("A > B", "X > B") == (0, 2, 2)  # the prefix stops at a mismatch
    assert hf1.hierarchical_f1([("A > B > C", "A > B > C"), ("A > B > D", "A > B > C")]) == \
        pytest.approx(5 / 6)
    assert hf1.hierarchical_f1([]) == 0.0
    assert hf1.similarity("adidas", "adodas") == pytest.approx(200 * 5 / 12)
    assert hf1.similarity("", "") == 100.0 and hf1.similarity("a", "") == 0.0
    assert hf1.binary_f1([(False, False)]) == 0.0
    assert hf1.binary_f1([(True, True), (True, False), (False, True)]) == pytest.approx(0.5)


def _log(rows: list[sc.Row], order: list[int]) -> list[dict]:
    return [{"seq_id": k, "qsl_idx": i, "data": sc.answer(rows[i], i).encode().hex()}
            for k, i in enumerate(order)]


@pytest.mark.slow
def test_requests_and_score_equal_the_official_code(catalogue: tuple[Path, list[sc.Row]],
                                                     tmp_path: Path) -> None:
    root, rows = catalogue
    cat = Catalogue(root)
    # a log in LoadGen's order, every kind of answer in it (for evaluation.py, below)
    order = [7, 2, 15, 0, 11, 4, 9, 17, 1, 13, 6, 3, 16, 8, 12, 5, 10, 14]
    log = _log(rows, order)
    (tmp_path / "mlperf_log_accuracy.json").write_text(json.dumps(log))
    # one process of the referee's Python: the catalogue into its datasets cache, the client's
    # requests from there, the qwen3-vl scorer on the log
    cache = tmp_path / "hf" / "datasets"
    proc = endpoints_referee.run(
        "cache", str(root), "Shopify/product-catalogue", str(cache),
        "+", "requests", str(cache), str(tmp_path / "official.json"),
        "+", "score", str(tmp_path / "mlperf_log_accuracy.json"), str(root),
        str(tmp_path / "score.json"), home=tmp_path)
    # the requests: the official dataset row, formatter and adapter, sample by sample
    official = json.loads((tmp_path / "official.json").read_text())
    assert len(official) == len(rows)
    for i, body in enumerate(official):
        image, fmt = pr.reference_image(cat.image(i))
        assert body["messages"] == list(pr.messages(cat.products[i], pr.image_url(image, fmt))), i
        assert body["max_completion_tokens"] == pr.MAX_NEW_TOKENS
        assert set(body) == {"model", "messages", "max_completion_tokens"}  # no sampling key
    assert {b["messages"][1]["content"][1]["image_url"]["url"].split(";")[0]
            for b in official} == {"data:image/PNG", "data:image/JPEG"}
    # the score: evaluation.py on the log
    theirs = json.loads((tmp_path / "score.json").read_text())["accuracy_txt"]
    ours = hf1.score([(e["qsl_idx"], bytes.fromhex(e["data"])) for e in log], cat.products)
    assert ours.accuracy_text() == theirs
    assert ours.unparsable == sum(sc.KINDS[i % len(sc.KINDS)] in ("fenced", "garbage", "extra")
                                  for i in order) > 0
    assert 0 < ours.f1 < 1
    row = re.search(r"From accuracy file\s*│\s*([\d.]+)\s*│\s*([\d.]+)\s*│\s*([\d.]+)",
                    proc.stderr + proc.stdout)
    assert row, proc.stderr[-2000:]
    assert [float(x) for x in row.groups()] == pytest.approx(
        [ours.f1, ours.brand, ours.secondhand_f1], abs=1e-6)


CATALOGUE = """
[artefacts.shopify-product-catalogue]
kind = "dataset"
benchmarks = ["qwen3-vl-235b-a22b"]
access = "user"
summary = "catalogue"
path = "datasets/qwen3-vl/product-catalogue"
layout = "hf-dataset"
items = {full}
unverified = "layout checked"
checksum_source = "test"
obtain = "hf download"
licence = "test"

[artefacts.shopify-product-catalogue-8k]
kind = "dataset"
benchmarks = ["qwen3-vl-235b-a22b"]
access = "user"
summary = "8k"
path = "datasets/qwen3-vl/product-catalogue-8k"
layout = "hf-dataset"
items = {train}
unverified = "layout checked"
checksum_source = "test"
obtain = "hf download"
licence = "test"

[defaults."qwen3-vl-235b-a22b"]
dataset = "shopify-product-catalogue"
scenario_dataset = {{ Interactive = "shopify-product-catalogue-8k" }}
"""


def test_get_adopts_the_catalogue_and_run_takes_it_per_scenario(
        catalogue: tuple[Path, list[sc.Row]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from mlharness.artefacts import load_catalogue
    from mlharness.artefacts.for_run import fill_from_cache
    from mlharness.cli.main import main

    root, rows = catalogue
    eight_k = tmp_path / "8k"  # a set with the train split only
    (eight_k / "data").mkdir(parents=True)
    for shard in sorted((root / "data").glob("train-*.parquet")):
        (eight_k / "data" / shard.name).symlink_to(shard)
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    toml = tmp_path / "catalogue.toml"
    toml.write_text(CATALOGUE.format(full=len(rows), train=13))
    monkeypatch.setenv("MLHARNESS_CATALOGUE", str(toml))
    data = {"benchmark": "qwen3-vl-235b-a22b", "scenario": "Offline", "backend": "openai"}
    with pytest.raises(Exception, match="needs shopify-product-catalogue, not in the cache") as e:
        fill_from_cache(data, None)
    assert "mlharness get shopify-product-catalogue --from PATH" in str(e.value)
    assert main(["get", "shopify-product-catalogue", "--from", str(eight_k)]) == 2  # 13 rows
    assert "13 rows in its train split(s), the data set has 18" in capsys.readouterr().err
    assert main(["get", "shopify-product-catalogue", "--from", str(root)]) == 0
    assert main(["get", "shopify-product-catalogue-8k", "--from", str(eight_k)]) == 0
    filled, notes = fill_from_cache(data, None, load_catalogue())
    assert Catalogue(Path(filled["dataset"])).products == Catalogue(root).products
    assert "dataset: shopify-product-catalogue from the cache (layout checked)" in notes[0]
    filled, _ = fill_from_cache({**data, "scenario": "Interactive"}, None, load_catalogue())
    assert len(Catalogue(Path(filled["dataset"]))) == 13


def test_the_picture_cache(catalogue: tuple[Path, list[sc.Row]], tmp_path: Path) -> None:
    from mlharness.llm import image_cache

    root, rows = catalogue
    cat = Catalogue(root)
    path = image_cache.cache_path(cat, len(cat), tmp_path)
    seen: list[tuple[int, int]] = []
    image_cache.build(cat, len(cat), path, 2, lambda done, total, _: seen.append((done, total)))
    assert seen[-1] == (len(rows), len(rows))
    urls = image_cache.open_urls(path)
    assert [urls[i].as_py() for i in range(len(rows))] == [
        pr.image_url(*pr.reference_image(r.image)) for r in rows]
    stamp = path.stat().st_mtime_ns
    image_cache.build(cat, len(cat), path, 2)  # there already: kept
    assert path.stat().st_mtime_ns == stamp
    assert image_cache.cache_path(cat, 5, tmp_path) != path  # another sample count, another file
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no part file left
