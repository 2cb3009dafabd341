"""Reading SQuAD v1.1 json into examples: questions over whitespace-split contexts.

Word splitting follows ``read_squad_examples`` in ``language/bert/create_squad_data.py``:
a word is a maximal run of characters other than space, tab, CR, LF and U+202F.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mlharness.errors import DatasetError

_SPLIT_CHARS = frozenset(" \t\r\n\u202f")


@dataclass(frozen=True)
class Example:
    """One question: its id, text, the context split into words, and the gold answer texts."""

    qas_id: str
    question: str
    doc_tokens: tuple[str, ...]
    answers: tuple[str, ...]
    paragraph: int  # index of the paragraph (examples of one paragraph share doc_tokens)


def split_context(text: str) -> list[str]:
    """Whitespace words of a context, as the reference splits them."""
    words: list[str] = []
    current: list[str] = []
    for ch in text:
        if ch in _SPLIT_CHARS:
            if current:
                words.append("".join(current))
                current = []
        else:
            current.append(ch)
    if current:
        words.append("".join(current))
    return words


def load_squad(path: Path) -> dict:
    """Parse the json and check the parts of the official schema we use."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"SQuAD file not found: {path}",
                           hint="pass --dataset path/to/dev-v1.1.json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{path} is not valid json: {exc}",
                           hint="download dev-v1.1.json again") from exc
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise DatasetError(f"{path} has no top-level 'data' list",
                           hint="expected the SQuAD v1.1 schema {'version': '1.1', 'data': [...]}")
    return data


def read_examples(path: Path) -> list[Example]:
    """All questions of the file in document order (the reference's example order)."""
    data = load_squad(path)
    examples: list[Example] = []
    paragraph_index = 0
    try:
        for article in data["data"]:
            for paragraph in article["paragraphs"]:
                words = tuple(split_context(paragraph["context"]))
                for qa in paragraph["qas"]:
                    answers = tuple(a["text"] for a in qa.get("answers", []))
                    examples.append(Example(str(qa["id"]), qa["question"], words, answers,
                                            paragraph_index))
                paragraph_index += 1
    except (KeyError, TypeError) as exc:
        raise DatasetError(f"{path}: malformed SQuAD entry ({type(exc).__name__}: {exc})",
                           hint="each article needs paragraphs[].context and qas[].id/question") from exc
    if not examples:
        raise DatasetError(f"{path} holds no questions", hint="check that it is dev-v1.1.json")
    return examples
