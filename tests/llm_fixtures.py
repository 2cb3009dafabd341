"""Small LLM fixtures in the official formats: a word-level tokenizer directory (slow BERT
WordPiece, loadable by AutoTokenizer offline), CNN/DailyMail-style summaries, and LoadGen token
accuracy logs."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
EOS = 3  # [SEP]

_PEOPLE = ["Mr. Smith", "Dr. Jones", "Gov. Brown", "Sen. Warren", "Prof. Li", "Mrs. O'Neil"]
_PLACES = ["Washington D.C.", "the U.S. Capitol", "New York", "St. Louis", "Jan. 5 talks"]
_CLAUSES = [
    "said the deal was worth $3.5 million.",
    "arrived at 3 p.m. on Friday, officials said.",
    "told CNN: \"We will not back down.\"",
    "denied the claims, according to a statement.",
    "met reporters outside; the U.K. team had left.",
    "won 2-1 after extra time!",
    "asked, \"Why now?\" before leaving.",
    "was born in 1964 and studied at the Univ. of Michigan.",
]


def articles(n: int, seed: int = 7) -> list[tuple[str, str]]:
    """``n`` (article, highlights) pairs of news-like English."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        sents = [f"{rng.choice(_PEOPLE)} of {rng.choice(_PLACES)} {rng.choice(_CLAUSES)}"
                 for _ in range(rng.randint(3, 6))]
        article = " ".join(sents)
        highlights = " ".join(rng.sample(sents, k=min(2, len(sents))))
        out.append((article, highlights))
    return out


def predictions(refs: list[str], seed: int = 11) -> list[str]:
    """Imperfect model summaries: words dropped and swapped, a few blank."""
    rng = random.Random(seed)
    out = []
    for i, ref in enumerate(refs):
        words = ref.split()
        if i % 7 == 3:
            out.append("")
            continue
        kept = [w for w in words if rng.random() > 0.2]
        if len(kept) > 3:
            j = rng.randrange(len(kept) - 1)
            kept[j], kept[j + 1] = kept[j + 1], kept[j]
        out.append(" ".join(kept))
    return out


def make_tokenizer(directory: Path, texts: list[str]) -> Path:
    """A slow BertTokenizer (cased) whose vocabulary holds every basic token of ``texts``."""
    from transformers.models.bert.tokenization_bert import BasicTokenizer

    basic = BasicTokenizer(do_lower_case=False)
    words = sorted({t for text in texts for t in basic.tokenize(text)})
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocab.txt").write_text("\n".join(SPECIALS + words) + "\n")
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "BertTokenizer", "do_lower_case": False, "model_max_length": 4096}))
    return directory


def write_cnn_dataset(path: Path, pairs: list[tuple[str, str]], encode) -> Path:
    """The llama3.1-8b reference's cnn_eval.json: records with instruction, input (the article),
    tok_input (the instruction filled in with it, encoded) and output."""
    template = {"llama": "Summarize: {input}"}
    records = [{"instruction": template,
                "input": article, "tok_input": encode(f"Summarize: {article}"),
                "output": highlights} for article, highlights in pairs]
    path.write_text(json.dumps(records))
    return path


def token_log(path: Path, outputs: dict[int, list[int]], dtype: str = "int64",
              first_token: bool = False, repeat: tuple[int, ...] = (),
              token_count: dict[int, int] | None = None) -> Path:
    """An accuracy log of token outputs laid out as LoadGen 6.0.17 writes one (one entry a line,
    ``token_data`` when the first token was reported apart; ``repeat``: qsl_idx logged twice)."""
    lines = []
    for seq, idx in enumerate(list(outputs) + list(repeat)):
        ids = np.asarray(outputs[idx], dtype=dtype)
        fields = [("seq_id", seq), ("qsl_idx", idx), ("data", f'"{hexs(ids, dtype)}"')]
        if first_token:
            fields.append(("token_data", f'"{hexs(ids[:1], dtype)}"'))
        fields.append(("token_count", (token_count or {}).get(idx, len(ids))))
        lines.append("{ " + ", ".join(f'"{k}" : {v}' for k, v in fields) + " }")
    path.write_text("[\n" + ",\n".join(lines) + "\n]\n")
    return path


def hexs(ids: list[int] | np.ndarray, dtype: str = "int32") -> str:
    """Token ids as LoadGen's upper-case hex of the SUT's bytes."""
    return np.asarray(ids, dtype=dtype).tobytes().hex().upper()


def import_transformers():
    """transformers without its torch models (tokenizers need none; with torch installed its
    import takes 20 s more), or a skip; USE_TORCH is set only while it imports, so nothing else
    in the process or its children sees it."""
    import os
    import sys

    import pytest

    if "transformers" in sys.modules:
        return sys.modules["transformers"]
    before = os.environ.get("USE_TORCH")
    os.environ["USE_TORCH"] = "0"
    try:
        return pytest.importorskip("transformers")
    finally:
        if before is None:
            del os.environ["USE_TORCH"]
        else:
            os.environ["USE_TORCH"] = before


def summary_case(tmp: Path, n: int) -> dict:
    """``n`` articles with reference summaries and predictions near them, a tokenizer knowing
    all their words, its ``encode`` and the ``cnn_eval.json`` written with it (under ``tmp``)."""
    pairs = articles(n)
    refs = [h for _, h in pairs]
    preds = predictions(refs)
    tokdir = make_tokenizer(tmp / "tok", [a for a, _ in pairs] + refs + preds + ["Summarize :"])
    tok = import_transformers().AutoTokenizer.from_pretrained(str(tokdir), use_fast=False)

    def encode(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False)

    dataset = write_cnn_dataset(tmp / "cnn_eval.json", pairs, encode)
    return {"pairs": pairs, "refs": refs, "preds": preds, "tokdir": tokdir, "encode": encode,
            "dataset": dataset}
