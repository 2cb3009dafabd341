"""SQuAD examples -> fixed-length BERT features, as the reference builds them.

Facts from ``language/bert/create_squad_data.py`` (``convert_examples_to_features``) and
``language/bert/squad_QSL.py``: max_seq_length 384, max_query_length 64, doc_stride 128; a
feature is ``[CLS] query [SEP] doc-window [SEP]`` zero-padded (id 0) to 384, segment 0 for the
query part and 1 for the window and its [SEP]; windows of at most ``384 - len(query) - 3`` tokens
start every ``min(length, doc_stride)`` tokens until one reaches the end; a token's "max context"
window is the one maximising ``min(left, right) + 0.01 * window_length`` (first wins on ties).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from mlharness.tasks.question_answering.squad import Example
from mlharness.tasks.question_answering.tokenization import CLS, SEP, WordPieceTokenizer

MAX_SEQ_LENGTH = 384
MAX_QUERY_LENGTH = 64
DOC_STRIDE = 128


@dataclass
class FeatureSet:
    """All features of a dataset as arrays (row = QSL index)."""

    input_ids: np.ndarray  # (N, L) int32
    input_mask: np.ndarray  # (N, L) int8
    segment_ids: np.ndarray  # (N, L) int8
    example_index: np.ndarray  # (N,) int32
    seq_len: np.ndarray  # (N,) int32: real tokens, [CLS] ... final [SEP]
    token_to_orig: np.ndarray  # (N, L) int32: context word index, -1 outside the window
    max_context: np.ndarray  # (N, L) bool

    ARRAYS = ("input_ids", "input_mask", "segment_ids", "example_index", "seq_len",
              "token_to_orig", "max_context")

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def head(self, n: int) -> FeatureSet:
        """The first ``n`` features."""
        return FeatureSet(**{name: getattr(self, name)[:n] for name in self.ARRAYS})


def doc_windows(n_tokens: int, max_tokens: int, stride: int) -> list[tuple[int, int]]:
    """(start, length) of the sliding windows over a document of ``n_tokens`` word pieces."""
    windows: list[tuple[int, int]] = []
    start = 0
    while start < n_tokens:
        length = min(n_tokens - start, max_tokens)
        windows.append((start, length))
        if start + length == n_tokens:
            break
        start += min(length, stride)
    return windows


def best_window(windows: Sequence[tuple[int, int]], position: int) -> int | None:
    """Index of the window giving ``position`` the most context on its shorter side."""
    best_score = None
    best_index = None
    for index, (start, length) in enumerate(windows):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score = score
            best_index = index
    return best_index


def build_features(
    examples: Sequence[Example],
    tokenizer: WordPieceTokenizer,
    max_seq_length: int = MAX_SEQ_LENGTH,
    max_query_length: int = MAX_QUERY_LENGTH,
    doc_stride: int = DOC_STRIDE,
    progress: Callable[[int, int], None] | None = None,
) -> FeatureSet:
    """Tokenise every example and cut its context into windows (one feature each)."""
    rows: dict[str, list] = {name: [] for name in FeatureSet.ARRAYS}
    cls_id, sep_id = tokenizer.convert_tokens_to_ids([CLS, SEP])
    doc_cache: dict[int, tuple[list[str], list[int]]] = {}
    for ex_index, example in enumerate(examples):
        query = tokenizer.tokenize(example.question)[:max_query_length]
        if example.paragraph not in doc_cache:
            doc_cache.clear()  # examples of a paragraph are consecutive
            pieces: list[str] = []
            piece_word: list[int] = []
            for word_index, word in enumerate(example.doc_tokens):
                for piece in tokenizer.tokenize(word):
                    pieces.append(piece)
                    piece_word.append(word_index)
            doc_cache[example.paragraph] = (pieces, piece_word)
        pieces, piece_word = doc_cache[example.paragraph]
        doc_ids = tokenizer.convert_tokens_to_ids(pieces)
        query_ids = tokenizer.convert_tokens_to_ids(query)
        windows = doc_windows(len(pieces), max_seq_length - len(query) - 3, doc_stride)
        offset = len(query) + 2
        for w_index, (start, length) in enumerate(windows):
            ids = [cls_id, *query_ids, sep_id, *doc_ids[start:start + length], sep_id]
            n = len(ids)
            input_ids = np.zeros(max_seq_length, np.int32)
            input_ids[:n] = ids
            mask = np.zeros(max_seq_length, np.int8)
            mask[:n] = 1
            segments = np.zeros(max_seq_length, np.int8)
            segments[offset:n] = 1
            to_orig = np.full(max_seq_length, -1, np.int32)
            to_orig[offset:offset + length] = piece_word[start:start + length]
            max_ctx = np.zeros(max_seq_length, bool)
            for i in range(length):
                max_ctx[offset + i] = best_window(windows, start + i) == w_index
            rows["input_ids"].append(input_ids)
            rows["input_mask"].append(mask)
            rows["segment_ids"].append(segments)
            rows["example_index"].append(ex_index)
            rows["seq_len"].append(n)
            rows["token_to_orig"].append(to_orig)
            rows["max_context"].append(max_ctx)
        if progress is not None and (ex_index % 200 == 0 or ex_index == len(examples) - 1):
            progress(ex_index + 1, len(examples))
    return FeatureSet(
        input_ids=np.stack(rows["input_ids"]),
        input_mask=np.stack(rows["input_mask"]),
        segment_ids=np.stack(rows["segment_ids"]),
        example_index=np.asarray(rows["example_index"], np.int32),
        seq_len=np.asarray(rows["seq_len"], np.int32),
        token_to_orig=np.stack(rows["token_to_orig"]),
        max_context=np.stack(rows["max_context"]),
    )
