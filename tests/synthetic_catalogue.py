"""A small Shopify product catalogue in its Hugging Face layout, with real images.

``write(root)`` writes ``root/data/train-0000N-of-00002.parquet`` and
``root/data/test-00000-of-00001.parquet`` as the Hub holds ``Shopify/product-catalogue``: the
reference's columns, the image a ``datasets`` Image struct (``{"bytes", "path"}``) with the
``huggingface`` schema metadata that makes ``datasets`` decode it as one. The images are PNG and
JPEG files Pillow writes (RGB, greyscale, palette, RGBA; one JPEG carries an EXIF orientation,
which ``datasets`` applies and the reference then saves as JPEG), a few with non-ASCII text.

``answer(i, kind)`` is the model's answer to sample ``i`` the tests' scripted server gives:
right, a wrong leaf, a wrong root, fenced in a code block (unparsable), not JSON, or with an
extra field (unparsable too).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
HF_METADATA = {b"huggingface": json.dumps({"info": {"features": {
    "product_image": {"_type": "Image"}}}}).encode()}
TREES = [
    ["Apparel & Accessories", "Clothing", "Shirts & Tops"],
    ["Apparel & Accessories", "Shoes", "Sneakers"],
    ["Home & Garden", "Kitchen & Dining", "Cookware", "Frying Pans"],
    ["Electronics", "Audio", "Headphones"],
    ["Sporting Goods", "Outdoor Recreation", "Camping & Hiking", "Tents"],
    ["Toys & Games", "Puzzles"],
]
KINDS = ("right", "leaf", "root", "fenced", "garbage", "extra", "right", "right")
SPLITS = {"train": [7, 6], "test": [5]}  # rows per shard


@dataclass(frozen=True)
class Row:
    title: str
    description: str | None
    categories: list[str]
    category: str
    brand: str
    secondhand: bool
    image: bytes


def _image(i: int) -> bytes:
    rng = np.random.default_rng(i)
    width, height = 24 + 3 * i, 16 + 2 * (i % 5)
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    image = Image.fromarray(pixels, "RGB")
    out = io.BytesIO()
    kind = i % 6
    if kind == 0:
        image.save(out, format="PNG")
    elif kind == 1:
        image.save(out, format="JPEG", quality=90)
    elif kind == 2:
        image.convert("L").save(out, format="JPEG", quality=85)
    elif kind == 3:
        image.convert("P").save(out, format="PNG")
    elif kind == 4:
        image.convert("RGBA").save(out, format="PNG")
    else:  # an EXIF orientation (6: rotate 90 cw): datasets transposes, the format is lost
        exif = Image.Exif()
        exif[0x0112] = 6
        image.save(out, format="JPEG", quality=80, exif=exif.tobytes())
    return out.getvalue()


def rows(count: int) -> list[Row]:
    out = []
    for i in range(count):
        tree = TREES[i % len(TREES)]
        others = [" > ".join(t) for t in TREES if t is not tree][: 2 + i % 3]
        categories = sorted([" > ".join(tree), *others], key=lambda c: (i * 7 + len(c)) % 5)
        title = f"Product {i}" + (" — édition spéciale" if i % 4 == 1 else "")
        description = None if i == 3 else (f"<div class='p'>Item {i}: " + "solid " * (i % 3)
                                           + "build, ünïcödé</div>")
        out.append(Row(title, description, categories, " > ".join(tree),
                       ["Acme", "Globex", "Initech", "Umbrella"][i % 4], i % 5 == 2, _image(i)))
    return out


def write(root: Path) -> list[Row]:
    """The catalogue under ``root`` (``data/*.parquet``); returns its rows in reference order
    (train shards, then test)."""
    total = sum(sum(v) for v in SPLITS.values())
    every = rows(total)
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    at = 0
    for split, shards in SPLITS.items():
        for n, count in enumerate(shards):
            part = every[at:at + count]
            at += count
            table = pa.table({
                "product_title": pa.array([r.title for r in part], pa.string()),
                "product_description": pa.array([r.description for r in part], pa.string()),
                "potential_product_categories": pa.array([r.categories for r in part],
                                                         pa.list_(pa.string())),
                "product_image": pa.array([{"bytes": r.image, "path": None} for r in part],
                                          IMAGE_TYPE),
                "ground_truth_category": pa.array([r.category for r in part], pa.string()),
                "ground_truth_brand": pa.array([r.brand for r in part], pa.string()),
                "ground_truth_is_secondhand": pa.array([r.secondhand for r in part], pa.bool_()),
            })
            table = table.replace_schema_metadata(HF_METADATA)
            pq.write_table(table, data / f"{split}-{n:05d}-of-{len(shards):05d}.parquet",
                           row_group_size=4)
    return every


def answer(row: Row, i: int) -> str:
    """The scripted model's answer to sample ``i`` (``KINDS[i % len(KINDS)]``)."""
    kind = KINDS[i % len(KINDS)]
    levels = row.category.split(" > ")
    category = row.category
    if kind == "leaf":
        category = " > ".join([*levels[:-1], "Something Else"])
    elif kind == "root":
        category = " > ".join(["Wrong Root", *levels[1:]])
    body = {"category": category, "brand": row.brand if i % 3 else row.brand.lower() + "x",
            "is_secondhand": row.secondhand if i % 4 else not row.secondhand}
    if kind == "fenced":
        return "```json\n" + json.dumps(body) + "\n```"
    if kind == "garbage":
        return "I think it is a " + levels[-1]
    if kind == "extra":
        return json.dumps({**body, "price": 3})
    return json.dumps(body)


def sample_of(messages: list[dict]) -> int:
    """The sample a chat request is about, read from its title (``Product <i>``)."""
    text = messages[-1]["content"][0]["text"]
    title = text.split("```text\n", 1)[1].split("\n", 1)[0]
    return int(title.split()[1])
