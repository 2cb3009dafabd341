"""Uncased BERT WordPiece tokenisation, equal to the tokenizer the reference uses.

The reference builds its features with ``transformers.BertTokenizer(vocab)``
(``language/bert/squad_QSL.py``), which is the original Google BERT tokenizer plus two HF
details reproduced here: the text is lower-cased one character at a time before the basic
tokenizer runs, and the special tokens ([CLS], [SEP], [UNK], [PAD], [MASK]) are never split.
``get_final_text`` in ``language/bert/accuracy-squad.py`` uses the plain basic tokenizer
(``BasicTokenizer(do_lower_case=True)``), i.e. ``split_specials=False, lower_per_char=False``.

Steps of the basic tokenizer: drop NUL, U+FFFD and control characters and turn whitespace into
spaces; put spaces around CJK ideographs; split on whitespace; lower-case and strip accents
(NFD, drop Mn marks) per word; split punctuation into its own tokens. WordPiece then takes the
longest vocab prefix greedily, "##" marks continuations, words over 100 characters or with no
full cover become [UNK].
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache
from pathlib import Path

from mlharness.errors import DatasetError
from mlharness.files import read_text_file

UNK, CLS, SEP, PAD, MASK = "[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"
SPECIAL_TOKENS = (UNK, SEP, PAD, CLS, MASK)
#: longer words become [UNK] (max_input_chars_per_word in both tokenizers)
MAX_CHARS_PER_WORD = 100


def load_vocab(path: Path) -> dict[str, int]:
    """Read ``vocab.txt``: one token per line, id = line number (a later duplicate wins)."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"vocab file not found: {path}",
                           hint="pass --vocab path/to/vocab.txt (the uncased BERT-large vocab)")
    vocab: dict[str, int] = {}
    text = read_text_file(path, "vocab.txt", DatasetError)
    for index, line in enumerate(text.split("\n")[:-1] if text.endswith("\n")
                                 else text.split("\n")):
        vocab[line] = index
    missing = [t for t in (CLS, SEP, UNK) if t not in vocab]
    if missing:
        raise DatasetError(f"{path} lacks the special tokens {missing}",
                           hint="use the BERT vocab.txt that matches the model")
    return vocab


def _is_whitespace(ch: str) -> bool:
    if ch in " \t\n\r":
        return True
    return unicodedata.category(ch) == "Zs"


def _is_control(ch: str) -> bool:
    if ch in "\t\n\r":
        return False
    return unicodedata.category(ch).startswith("C")


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    # every non-alphanumeric printable ASCII character counts, "^", "$", "`" included
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


_CJK_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)


def _is_cjk(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def _clean(text: str) -> str:
    out = []
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or _is_control(ch):
            continue
        out.append(" " if _is_whitespace(ch) else ch)
    return "".join(out)


def _space_cjk(text: str) -> str:
    return "".join(f" {ch} " if _is_cjk(ord(ch)) else ch for ch in text)


def _strip_accents(word: str) -> str:
    return "".join(ch for ch in unicodedata.normalize("NFD", word)
                   if unicodedata.category(ch) != "Mn")


def _split_punctuation(word: str) -> list[str]:
    pieces: list[str] = []
    current: list[str] = []
    for ch in word:
        if _is_punctuation(ch):
            if current:
                pieces.append("".join(current))
                current = []
            pieces.append(ch)
        else:
            current.append(ch)
    if current:
        pieces.append("".join(current))
    return pieces


def basic_tokenize(text: str, lower: bool = True) -> list[str]:
    """The basic (pre-WordPiece) tokenizer of the original BERT code, uncased by default."""
    text = _space_cjk(_clean(text))
    tokens: list[str] = []
    for word in text.split():
        if lower:
            word = _strip_accents(word.lower())
        tokens.extend(_split_punctuation(word))
    # joining and re-splitting drops the empty strings accent stripping can leave
    return " ".join(tokens).split()


class WordPieceTokenizer:
    """Full uncased tokenizer: basic tokenizer, then greedy longest-match WordPiece."""

    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = vocab
        self.unk_id = vocab[UNK]
        self._pieces = lru_cache(maxsize=1 << 18)(self._wordpiece)

    @classmethod
    def from_file(cls, path: Path) -> WordPieceTokenizer:
        return cls(load_vocab(path))

    def _wordpiece(self, word: str) -> tuple[str, ...]:
        if len(word) > MAX_CHARS_PER_WORD:
            return (UNK,)
        pieces: list[str] = []
        start = 0
        while start < len(word):
            end = len(word)
            found = None
            while start < end:
                candidate = word[start:end] if start == 0 else "##" + word[start:end]
                if candidate in self.vocab:
                    found = candidate
                    break
                end -= 1
            if found is None:
                return (UNK,)
            pieces.append(found)
            start = end
        return tuple(pieces)

    def _tokenize_plain(self, text: str) -> list[str]:
        # HF lower-cases character by character first (no final-sigma rule), then runs the
        # basic tokenizer, which lower-cases each word again (a no-op by then).
        text = "".join(ch.lower() for ch in text)
        out: list[str] = []
        for word in basic_tokenize(text):
            out.extend(self._pieces(word))
        return out

    def tokenize(self, text: str) -> list[str]:
        """WordPiece tokens of ``text``; special tokens written in the text stay whole."""
        out: list[str] = []
        for piece, special in _split_specials(text):
            if special:
                out.append(piece)
            else:
                out.extend(self._tokenize_plain(piece))
        return out

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int]:
        return [self.vocab.get(t, self.unk_id) for t in tokens]


def _split_specials(text: str) -> list[tuple[str, bool]]:
    """Cut ``text`` around literal special tokens (leftmost, longest match first)."""
    if "[" not in text:
        return [(text, False)]
    parts: list[tuple[str, bool]] = []
    pos = 0
    start = 0
    while pos < len(text):
        if text[pos] == "[":
            match = next((t for t in SPECIAL_TOKENS if text.startswith(t, pos)), None)
            if match is not None:
                if start < pos:
                    parts.append((text[start:pos], False))
                parts.append((match, True))
                pos += len(match)
                start = pos
                continue
        pos += 1
    if start < len(text):
        parts.append((text[start:], False))
    return parts
