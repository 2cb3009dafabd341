"""WordPiece tokenisation: hand-checked tokens, and equality with the reference's tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlharness.errors import DatasetError
from mlharness.tasks.question_answering.tokenization import (
    WordPieceTokenizer, basic_tokenize, load_vocab)

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "quick", "brown", "fox", ",", ".",
         "!", "?", "'", "s", "(", ")", "-", "un", "##aff", "##able", "hello", "world", "cafe",
         "naive", "中", "国", "a", "##a", "οδοσ", "steve", "smith", "1895", "1943", "$", "^"]


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> WordPieceTokenizer:
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return WordPieceTokenizer.from_file(path)


@pytest.mark.parametrize("text, expected", [
    ("The quick, brown fox!", ["the", "quick", ",", "brown", "fox", "!"]),
    ("unaffable", ["un", "##aff", "##able"]),
    ("Café NAÏVE", ["cafe", "naive"]),  # lower-cased, accents stripped
    ("中国人", ["中", "国", "[UNK]"]),  # CJK characters split apart; 人 is not in the vocab
    ("hello\x07 world\x00", ["hello", "world"]),  # control characters dropped
    ("hel\x00lo", ["hello"]),  # a control character inside a word vanishes without a split
    ("hello\u3000world\u00a0fox", ["hello", "world", "fox"]),  # Unicode spaces split
    ("xyzzy quick", ["[UNK]", "quick"]),  # no cover -> [UNK] for the whole word
    ("a" * 100, ["a"] + ["##a"] * 99),
    ("a" * 101, ["[UNK]"]),  # more than 100 characters
    ("Steve Smith's (1895-1943).", ["steve", "smith", "'", "s", "(", "1895", "-", "1943", ")",
                                     "."]),
    ("$^", ["$", "^"]),  # ASCII symbols count as punctuation
    ("[CLS] hello[SEP]", ["[CLS]", "hello", "[SEP]"]),  # special tokens are kept whole
    ("[cls]", ["[UNK]", "[UNK]", "[UNK]"]),  # only exact special tokens; 'cls' is unknown
    ("ΟΔΟΣ", ["οδοσ"]),  # lower-cased per character: no final sigma
    ("", []),
])
def test_known_tokens(tok: WordPieceTokenizer, text: str, expected: list[str]) -> None:
    assert tok.tokenize(text) == expected


def test_ids_follow_line_numbers(tok: WordPieceTokenizer) -> None:
    assert tok.convert_tokens_to_ids(["[CLS]", "fox", "[SEP]", "nope"]) == [2, 8, 3, 1]


def test_basic_tokenizer_of_get_final_text() -> None:
    # the accuracy script's BasicTokenizer lower-cases per word (final sigma applies) and does
    # not protect special tokens
    assert basic_tokenize("ΟΔΟΣ") == ["οδος"]
    assert basic_tokenize("[CLS] Steve Smith's") == ["[", "cls", "]", "steve", "smith", "'", "s"]


def test_vocab_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="not found"):
        load_vocab(tmp_path / "missing.txt")
    bad = tmp_path / "vocab.txt"
    bad.write_text("the\nfox\n")
    with pytest.raises(DatasetError, match="special tokens"):
        load_vocab(bad)
