"""ROUGE for the llama benchmarks, computed as the official scripts compute it.

language/llama3.1-8b/evaluation.py and language/llama2-70b/evaluate-accuracy.py: decode each
sample's first logged output (skipping special tokens), strip prediction and reference, put
one sentence per line (``nltk.sent_tokenize``), score every pair with Google's ``rouge_score``
(rouge1, rouge2, rougeL, rougeLsum F-measures, Porter stemmer: what HF ``evaluate``'s "rouge"
runs with ``use_stemmer=True, use_aggregator=False``), report the mean x 100 rounded to 4
places; ``gen_len`` is the characters of the processed predictions, ``tokens_per_sample`` (llama2)
the output tokens per sample rounded to 1 place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from mlharness.errors import ConfigError, DatasetError
from mlharness.llm.accuracy_log import TokenDtype, first_per_sample, read_entries
from mlharness.llm.sentences import sent_tokenize

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
Decoder = Callable[[list[np.ndarray]], list[str]]


class RougeResult(BaseModel):
    """The official numbers (ROUGE in percent)."""

    rouge1: float
    rouge2: float
    rougeL: float
    rougeLsum: float
    gen_len: int
    gen_num: int
    gen_tok_len: int | None = None

    @property
    def tokens_per_sample(self) -> float | None:
        if self.gen_tok_len is None or not self.gen_num:
            return None
        return round(self.gen_tok_len / self.gen_num, 1)

    def metrics(self) -> dict[str, float]:
        """Values under the checker's metric names (rules/v6.1.toml)."""
        out = {"ROUGE1": self.rouge1, "ROUGE2": self.rouge2, "ROUGEL": self.rougeL,
               "ROUGELSUM": self.rougeLsum, "GEN_LEN": float(self.gen_len)}
        if self.tokens_per_sample is not None:
            out["TOKENS_PER_SAMPLE"] = self.tokens_per_sample
        return out

    def accuracy_line(self) -> str:
        """The official script's result dict as a line the checker's patterns read (plain
        numbers: numpy 2 would print ``np.int64(...)``, which GEN_LEN's pattern misses)."""
        parts = {k: getattr(self, k) for k in ROUGE_TYPES}
        line = {k: (f"{v}" if self.gen_tok_len is None else v) for k, v in parts.items()}
        extra: dict[str, object] = {"gen_len": self.gen_len, "gen_num": self.gen_num}
        if self.gen_tok_len is not None:
            extra |= {"gen_tok_len": self.gen_tok_len, "tokens_per_sample": self.tokens_per_sample}
        return repr(line | extra)


def postprocess(texts: Sequence[str]) -> list[str]:
    """Strip, then one sentence per line (both scripts' ``postprocess_text``)."""
    return ["\n".join(sent_tokenize(t.strip())) for t in texts]


def _scorer():
    try:
        from rouge_score import rouge_scorer  # type: ignore[import-untyped]
    except ImportError as exc:
        raise ConfigError("LLM accuracy needs rouge_score",
                          "pip install 'mlharness[llm]'") from exc
    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)


def score_texts(predictions: Sequence[str], references: Sequence[str],
                gen_tok_len: int | None = None) -> RougeResult:
    """Official ROUGE of decoded predictions against reference summaries (same order)."""
    if len(predictions) != len(references):
        raise DatasetError(f"{len(predictions)} predictions for {len(references)} references",
                           "give one reference per prediction")
    if not predictions:
        raise DatasetError("nothing to score", "the accuracy log has no entries")
    preds, refs = postprocess(predictions), postprocess(references)
    scorer = _scorer()
    per_type: dict[str, list[float]] = {k: [] for k in ROUGE_TYPES}
    for ref, pred in zip(refs, preds, strict=True):
        scores = scorer.score(ref, pred)
        for k in ROUGE_TYPES:
            per_type[k].append(scores[k].fmeasure)
    means = {k: float(round(np.mean(v) * 100, 4)) for k, v in per_type.items()}
    return RougeResult(**means, gen_len=int(sum(len(p) for p in preds)), gen_num=len(preds),
                       gen_tok_len=gen_tok_len)


def score_log(log: Path, references: Sequence[str], decode: Decoder,
              dtype: TokenDtype = "int64", count_tokens: bool = False) -> RougeResult:
    """Official ROUGE of a LoadGen accuracy log: each sample's first entry, ``decode``d (e.g.
    :func:`hf_decoder`), against ``references[qsl_idx]``. ``count_tokens``: report
    ``tokens_per_sample`` as llama2-70b's script does. ``dtype``: the scripts' ``--dtype``."""
    entries = first_per_sample(read_entries(log))
    for e in entries:
        if not 0 <= e.qsl_idx < len(references):
            raise DatasetError(f"accuracy log sample {e.qsl_idx} is outside the dataset "
                               f"({len(references)} references)", "is this the right dataset?")
    tokens = [e.tokens(dtype) for e in entries]
    texts = decode(tokens)
    n_tokens = sum(len(t) for t in tokens) if count_tokens else None
    return score_texts(texts, [references[e.qsl_idx] for e in entries], gen_tok_len=n_tokens)


def hf_decoder(tokenizer_dir: Path, use_fast: bool = False,
               skip_special_tokens: bool = True) -> Decoder:
    """``batch_decode`` of the Hugging Face tokenizer in a local directory, nothing downloaded.
    The defaults are the llama and deepseek-r1 scripts' (slow tokenizer, special tokens skipped);
    gpt-oss-120b's eval_mlperf_accuracy.py decodes with the fast one and keeps them."""
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise ConfigError("decoding token ids needs transformers",
                          "pip install 'mlharness[llm]'") from exc
    path = Path(tokenizer_dir)
    if not path.is_dir():
        raise ConfigError(f"tokenizer directory {path} not found",
                          "pass the model checkpoint's directory (tokenizer files included)")
    tok = AutoTokenizer.from_pretrained(str(path), use_fast=use_fast, local_files_only=True)

    def decode(batch: list[np.ndarray]) -> list[str]:
        return tok.batch_decode([b.tolist() for b in batch],
                                skip_special_tokens=skip_special_tokens)

    return decode
