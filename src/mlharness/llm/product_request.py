"""qwen3-vl-235b-a22b's requests, built as the v6.1 reference client builds them.

The reference is MLCommons' endpoints client (``../shared/official/endpoints``):
``dataset_manager/predefined/shopify_product_catalogue/__init__.py`` (``_process_sample_to_row``:
the image as ``datasets`` decodes it, saved again by Pillow in its own format, base64) and
``presets.py`` (``ShopifyMultimodalFormatter``: a system message holding the answer's JSON
schema, and a user message of one text part and one ``image_url`` part, a
``data:image/<FORMAT>;base64,`` URL). ``openai/openai_msgspec_adapter.py`` sends them with the
model's name, ``max_completion_tokens`` from the example configs (150) and no sampling key at
all: the server's defaults, which for Qwen3-VL are its ``generation_config.json`` (temperature
0.7, top-p 0.8, top-k 20; the v6.1 README lists them).

The image bytes are therefore not the data set's file but Pillow's re-encoding of the decoded
image (JPEG at Pillow's default quality, PNG at its default compression): the same bytes as the
reference's where Pillow's encoders give the same output (``tests/test_qwen3vl_endpoints.py``
compares them with the official client's requests).
"""

from __future__ import annotations

import base64
import io
import json
from functools import cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict

from mlharness.errors import DatasetError
from mlharness.llm.product_catalogue import Product

#: ``model_params.max_new_tokens`` of examples/08_Qwen3-VL-235B-A22B_Example/*.yaml
MAX_NEW_TOKENS = 150
#: the format ``_process_sample_to_row`` gives an image Pillow reports none for (an image that
#: ``datasets`` rotated by its EXIF orientation is a new one, without a format)
DEFAULT_FORMAT = "JPEG"


class ProductMetadata(BaseModel):
    """The answer the model is asked for (the reference's ``ProductMetadata``: three fields, no
    others), as the scorer validates it."""

    model_config = ConfigDict(extra="forbid")

    category: str
    brand: str
    is_secondhand: bool


@cache
def _text(name: str) -> str:
    return resources.files("mlharness").joinpath("data", "qwen3vl", name).read_text("utf-8")


def system_prompt() -> str:
    """The system message (``data/qwen3vl/system_prompt.txt``, see its SOURCE.md)."""
    return _text("system_prompt.txt")


#: what the reference client writes for a missing title or description: its rows go through a
#: pandas DataFrame, whose string columns (pandas 3) hold a missing text as NaN, formatted
#: ``nan`` (the v6.0 LoadGen harness formatted the data set's None as ``None``)
MISSING_TEXT = "nan"


def user_text(product: Product) -> str:
    """The user message's text part: title, description and the candidate categories as a JSON
    list (``json.dumps`` with its defaults, as the reference writes them)."""
    title = MISSING_TEXT if product.title is None else product.title
    description = MISSING_TEXT if product.description is None else product.description
    return _text("user_prompt.txt").format(title=title, description=description,
                                           categories=json.dumps(product.categories))


def reference_image(data: bytes) -> tuple[bytes, str]:
    """The image bytes the reference sends for stored image ``data``, and their format: decoded
    as ``datasets``' Image feature decodes (EXIF orientation applied when the tag is present),
    saved again in the decoded format (``JPEG`` when Pillow names none)."""
    from PIL import Image, ImageOps, UnidentifiedImageError  # lazy: Pillow loads with the images

    try:
        image: Image.Image = Image.open(io.BytesIO(data))
        image.load()
        if image.getexif().get(Image.ExifTags.Base.Orientation) is not None:
            image = ImageOps.exif_transpose(image)
        fmt = image.format or DEFAULT_FORMAT
        out = io.BytesIO()
        image.save(out, format=fmt)
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise DatasetError(f"an image of the catalogue cannot be decoded or saved again ({exc})",
                           "the data set is damaged; fetch it again") from exc
    return out.getvalue(), fmt


def image_url(data: bytes, fmt: str) -> str:
    """The ``image_url`` part's URL: ``data:image/<FORMAT>;base64,<bytes>``."""
    return f"data:image/{fmt};base64,{base64.b64encode(data).decode('ascii')}"


def messages(product: Product, url: str) -> tuple[dict[str, Any], ...]:
    """The chat messages of one sample: the system prompt, then the product's text and image."""
    return ({"role": "system", "content": system_prompt()},
            {"role": "user", "content": [{"type": "text", "text": user_text(product)},
                                         {"type": "image_url", "image_url": {"url": url}}]})
