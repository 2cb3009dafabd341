"""Reading SQuAD v1.1 json into examples: questions over whitespace-split contexts.

Word splitting follows ``read_squad_examples`` in ``language/bert/create_squad_data.py``:
a word is a maximal run of characters other than space, tab, CR, LF and U+202F.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mlharness.errors import DatasetError
from mlharness.files import read_text_file

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
    text = read_text_file(path, "the SQuAD file", DatasetError)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path} is not valid json: {exc}",
                           hint="download dev-v1.1.json again") from exc
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise DatasetError(f"{path} has no top-level 'data' list",
                           hint="expected the SQuAD v1.1 schema {'version': '1.1', 'data': [...]}")
    return data


def check_squad(path: Path) -> None:
    """Check up front what tokenising and scoring will read: every article's paragraphs with a
    context, every question's id, text and a non-empty ``answers`` list of ``{"text": ...}``."""
    data = load_squad(path)
    hint = "each question needs id, question and answers: [{'text': ...}] (SQuAD v1.1)"
    for a, article in enumerate(data["data"]):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise DatasetError(f"{path}: article {a} has no 'paragraphs' list", hint=hint)
        for paragraph in paragraphs:
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("context"), str):
                raise DatasetError(f"{path}: a paragraph of article {a} has no 'context'",
                                   hint=hint)
            for qa in paragraph.get("qas") or []:
                qid = qa.get("id", "?") if isinstance(qa, dict) else "?"
                for key in ("id", "question"):
                    if not isinstance(qa, dict) or key not in qa:
                        raise DatasetError(f"{path}: question {qid} has no '{key}'", hint=hint)
                answers = qa.get("answers")
                if (not isinstance(answers, list) or not answers
                        or not all(isinstance(x, dict) and isinstance(x.get("text"), str)
                                   for x in answers)):
                    raise DatasetError(f"{path}: question {qid} has no gold 'answers' "
                                       "(scoring needs at least one {'text': ...})", hint=hint)


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
