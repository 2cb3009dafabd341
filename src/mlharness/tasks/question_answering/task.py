"""The BERT task: SQuAD v1.1 features in, (384, 2) float32 start/end logits out, EM/F1 scored.

Facts: ``language/bert/onnxruntime_SUT.py`` (inputs ``input_ids``, ``input_mask``,
``segment_ids`` int64; response ``np.stack([start, end], -1)`` of one sample, float32 (384, 2));
``language/bert/accuracy-squad.py`` (responses decoded as ``reshape(-1, 2)`` and padded with
-10000 to 384); ``tools/submission/submission_checker/constants.py`` (F1 targets).

Two ways to feed the model, chosen with the task option ``sequence_length``
(``--task-option sequence_length=...``; ``auto``, the default, picks ``fixed`` when the model
declares a fixed sequence length — as its backend reads it — and ``dynamic`` otherwise):

* ``fixed``: every batch padded to 384 like the reference; the full (384, 2) model output is sent.
* ``dynamic`` (default, the fast path): a batch is cut to its longest real sequence, rounded up
  to a multiple of ``sequence_step`` (default 32; 1 cuts exactly), so short features cost less
  while batches come in a dozen widths, not hundreds: OpenVINO and oneDNN's AMX kernels are
  built per input shape, and each new shape costs about a batch's time (on a Xeon with AMX,
  96 features on OpenVINO with no batch of each width warmed: 7.9 samples/s exact, 9.5 in steps
  of 32; onnxruntime the same either way). The warm-up runs one batch of each width the run's
  features need (docs/performance.md). Positions past a sample's own real length are sent as
  -10000 — the value the accuracy script uses for positions a response does not cover — so a
  response never depends on which other samples shared its batch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np

from mlharness.files import cache_root
from mlharness.options import Options
from mlharness.rules import BenchmarkRules
from mlharness.errors import ConfigError, DatasetError, ModelError
from mlharness.tasks.base import (AccuracyResult, IndexRange, Progress, TaskOptions, TensorTask,
                                  TensorSpec)
from mlharness.tasks.question_answering import cache
from mlharness.tasks.question_answering.evaluate import evaluate
from mlharness.tasks.question_answering.features import (
    DOC_STRIDE, MAX_QUERY_LENGTH, MAX_SEQ_LENGTH, FeatureSet, build_features)
from mlharness.tasks.question_answering.postprocess import PAD_LOGIT, predict_example
from mlharness.tasks.question_answering.squad import check_squad, load_squad, read_examples
from mlharness.tasks.question_answering.tokenization import WordPieceTokenizer, load_vocab

INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")
SEQUENCE_MODES = ("auto", "dynamic", "fixed")
#: the default ``sequence_step``: dynamic widths are multiples of it (12 widths up to 384)
SEQUENCE_STEP = 32
#: the most widths a warm-up runs a batch of (384 / 16)
WARMUP_WIDTHS = 24


class BertSquadTask(TensorTask):
    """BERT-large question answering on SQuAD v1.1 (MLPerf ``bert-99`` / ``bert-99.9``)."""

    loadgen_model = "bert"
    response_dtype = "float32"
    transformer = True

    def __init__(self, name: str, dataset: Path, vocab: Path, cache_dir: Path | None = None,
                 max_samples: int | None = None, sequence_length: str = "auto",
                 model_inputs: list[TensorSpec] | None = None,
                 sequence_step: int = SEQUENCE_STEP, rules: BenchmarkRules | None = None) -> None:
        if sequence_length not in SEQUENCE_MODES:
            raise ConfigError(f"unknown sequence_length {sequence_length!r}",
                              hint="use sequence_length=dynamic (fast) or fixed (384, as the reference)")
        sequence_length = _resolve_sequence_mode(sequence_length, model_inputs)
        self.name = name
        self.dataset = Path(dataset)
        self.vocab_path = Path(vocab)
        self.cache_dir = cache_root(cache_dir)
        self.max_samples = max_samples
        self.dynamic = sequence_length == "dynamic"
        if not 1 <= sequence_step <= MAX_SEQ_LENGTH:
            raise ConfigError(f"sequence_step must be 1..{MAX_SEQ_LENGTH}, not {sequence_step}",
                              hint=f"use sequence_step={SEQUENCE_STEP} (the default) or 1 to cut "
                              "each batch to its longest sequence exactly")
        self.sequence_step = sequence_step
        self.rules = rules
        self.target = rules.accuracy_target if rules is not None else None  # the F1 target
        self._features: FeatureSet | None = None
        self._all_count: int | None = None
        for path, what in ((self.dataset, "--dataset dev-v1.1.json"), (self.vocab_path, "--vocab vocab.txt")):
            if not path.is_file():
                raise DatasetError(f"file not found: {path}", hint=f"pass {what}")

    # ---- features --------------------------------------------------------------------------
    @property
    def params(self) -> dict[str, int]:
        return {"max_seq_length": MAX_SEQ_LENGTH, "max_query_length": MAX_QUERY_LENGTH,
                "doc_stride": DOC_STRIDE}

    def cache_file(self) -> Path:
        return cache.cache_path(self.cache_dir, cache.cache_key(self.dataset, self.vocab_path,
                                                                self.params))

    def prepare(self, progress: Progress | None = None) -> None:
        """Check the SQuAD file and vocab (what tokenising and scoring need), then build the
        feature cache (tokenising the whole dev set) unless it exists."""
        check_squad(self.dataset)
        WordPieceTokenizer.from_file(self.vocab_path)
        self._load_features(progress)

    def _load_features(self, progress: Progress | None = None) -> FeatureSet:
        if self._features is not None:
            return self._features
        path = self.cache_file()
        features = cache.load_features(path)
        if features is None:
            tokenizer = WordPieceTokenizer.from_file(self.vocab_path)
            examples = read_examples(self.dataset)

            def report(done: int, total: int) -> None:
                if progress is not None:
                    progress(done, total, "tokenising SQuAD")

            features = build_features(examples, tokenizer, progress=report)
            try:
                cache.save_features(path, features)
            except OSError as exc:
                raise ConfigError(f"cannot write the feature cache {path}: {exc}",
                                  hint="pass a writable --cache-dir") from exc
        self._all_count = len(features)
        if self.max_samples:
            features = features.head(self.max_samples)
        self._features = features
        return features

    @property
    def features(self) -> FeatureSet:
        return self._load_features()

    # ---- QSL -------------------------------------------------------------------------------
    @property
    def model_inputs(self) -> list[TensorSpec]:
        seq = None if self.dynamic else MAX_SEQ_LENGTH
        return [TensorSpec(n, "int64", (None, seq)) for n in INPUT_NAMES]

    def total_count(self) -> int:
        return len(self.features)

    def performance_count(self) -> int:
        # squad_QSL.py: the whole set fits in memory; perf count = total (10833 on dev-v1.1)
        return len(self.features)

    def load_samples(self, indices: Sequence[int]) -> None:
        """Features are held in memory from the start (the reference's load is a no-op too)."""

    def unload_samples(self, indices: Sequence[int]) -> None:
        """Nothing to free."""

    def sample_length(self, index: int) -> int:
        return int(self.features.seq_len[index])

    def batch_inputs(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
        f = self.features
        rows = np.asarray(indices)
        width = int(self._widths(f.seq_len[rows].max())) if self.dynamic else MAX_SEQ_LENGTH
        return {
            "input_ids": f.input_ids[rows, :width].astype(np.int64),
            "input_mask": f.input_mask[rows, :width].astype(np.int64),
            "segment_ids": f.segment_ids[rows, :width].astype(np.int64),
        }

    def _widths(self, longest: Any) -> Any:
        """Dynamic batch widths (of a longest length, or of an array of them): rounded up to the
        step, at most 384."""
        step, longest = self.sequence_step, np.asarray(longest, np.int64)
        return np.minimum(MAX_SEQ_LENGTH, -(-longest // step) * step)

    def warmup_batches(self, batch: list[int]) -> list[list[int]]:
        """Dynamic: a batch of ``len(batch)`` copies of one feature per width the features need,
        widest first; with more than WARMUP_WIDTHS widths (a sequence_step under 16) the widest
        alone, as a warm-up of hundreds would take long."""
        if not self.dynamic:
            return [batch]
        widths, first = np.unique(self._widths(self.features.seq_len), return_index=True)
        chosen = first[::-1][:1 if len(widths) > WARMUP_WIDTHS else None]  # widest first
        return [[int(index)] * len(batch) for index in chosen]

    # ---- responses -------------------------------------------------------------------------
    @staticmethod
    def split_logits(outputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) logits [N, L] from two outputs or one [N, L, 2] output."""
        values = list(outputs.items())
        if len(values) == 1:
            (name, out), = values
            if out.ndim != 3 or out.shape[-1] != 2:
                raise ModelError(f"model output {name!r} has shape {list(out.shape)}; expected "
                                 "[N, L, 2] or two outputs (start and end logits)",
                                 hint="export start/end logits as two outputs or one [N,L,2]")
            return out[..., 0], out[..., 1]
        if len(values) != 2:
            raise ModelError(f"model has {len(values)} outputs {[n for n, _ in values]}; "
                             "expected start and end logits",
                             hint="use a BERT SQuAD model with start/end logit outputs")
        (n0, a), (n1, b) = values
        if "end" in n0.lower() and "start" in n1.lower():
            a, b = b, a  # name says so; otherwise keep the model's order, as the reference does
        return a, b

    def encode_responses(self, indices: Sequence[int], outputs: dict[str, np.ndarray]
                         ) -> list[bytes]:
        start, end = self.split_logits(outputs)
        n, width = start.shape[0], start.shape[-1]
        start = start.reshape(n, width)
        end = end.reshape(n, width)
        out = np.full((n, MAX_SEQ_LENGTH, 2), PAD_LOGIT, np.float32)
        out[:, :width, 0] = start
        out[:, :width, 1] = end
        if self.dynamic:
            lengths = self.features.seq_len[np.asarray(indices)]
            out[np.arange(MAX_SEQ_LENGTH)[None, :] >= lengths[:, None]] = PAD_LOGIT
        return [row.tobytes() for row in out]

    # ---- accuracy --------------------------------------------------------------------------
    def score(self, entries: list[tuple[int, bytes]]) -> AccuracyResult:
        """EM/F1 of the logged responses, as accuracy-squad.py + evaluate_v1.1.py compute them."""
        features = self.features
        examples = read_examples(self.dataset)
        vocab = load_vocab(self.vocab_path)
        id_to_token = [""] * (max(vocab.values()) + 1)
        for token, index in vocab.items():
            id_to_token[index] = token
        logits: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for qsl_idx, data in entries:
            if not 0 <= qsl_idx < len(features):
                raise DatasetError(f"accuracy log names sample {qsl_idx}, outside 0..{len(features) - 1}",
                                   hint="score the log with the same dataset and --max-samples")
            values = np.frombuffer(data, np.float32)
            if values.size % 2 or values.size > 2 * MAX_SEQ_LENGTH:
                raise DatasetError(f"response of sample {qsl_idx} has {len(data)} bytes",
                                   hint="BERT responses are float32 (L, 2) with L <= 384")
            pairs = values.reshape(-1, 2)
            start = np.full(MAX_SEQ_LENGTH, PAD_LOGIT)
            end = np.full(MAX_SEQ_LENGTH, PAD_LOGIT)
            start[:len(pairs)] = pairs[:, 0]
            end[:len(pairs)] = pairs[:, 1]
            logits[qsl_idx] = (start, end)  # a later duplicate wins, as in accuracy-squad.py
        rows_of: dict[int, list[int]] = {}
        for row, ex in enumerate(features.example_index.tolist()):
            rows_of.setdefault(ex, []).append(row)
        if self.max_samples:
            # only the questions whose windows are in the run are asked
            scored = [examples[i] for i in sorted(rows_of)]
        else:
            scored = examples
        predictions = {ex.qas_id: predict_example(ex, rows_of.get(i, []), features, logits,
                                                  id_to_token)
                       for i, ex in enumerate(examples) if not self.max_samples or i in rows_of}
        questions: list[tuple[str, list[str]]]
        if self.max_samples:
            questions = [(ex.qas_id, list(ex.answers)) for ex in scored]
        else:
            questions = _dataset_questions(self.dataset)
        result = evaluate(questions, predictions)
        text = json.dumps(result)
        return AccuracyResult("F1", result["f1"], text, self.target, {
            "exact_match": result["exact_match"], "f1": result["f1"],
            "questions": len(questions), "features_logged": len(logits),
            "features": len(features), "dataset_features": self._all_count,
        })

    def index_ranges(self) -> dict[str, IndexRange]:
        """Token ids go up to the vocab's last: a model with fewer word embeddings would fail
        on them (onnxruntime), answer with zeros for them (OpenVINO) or abort (compiled)."""
        tokens = max(load_vocab(self.vocab_path).values()) + 1
        return {"input_ids": IndexRange(
            tokens, f"the {tokens} tokens of --vocab {self.vocab_path}",
            "pass the vocab.txt the model was trained with (the official BERT-large vocab "
            "has 30522 tokens, as many as the official model's word embeddings)")}

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "dataset": str(self.dataset), "vocab": str(self.vocab_path),
                "features": len(self.features), "sequence_length": "dynamic" if self.dynamic else "fixed",
                **({"sequence_step": self.sequence_step} if self.dynamic else {}), **self.params}


def _resolve_sequence_mode(mode: str, model_inputs: list[TensorSpec] | None) -> str:
    """``auto`` -> fixed/dynamic from the model's declared input shape; refuse impossible asks."""
    dims = next((t.shape for t in model_inputs or [] if t.name == "input_ids"), None)
    fixed_len = dims[1] if dims and len(dims) == 2 else None
    if fixed_len is not None and fixed_len != MAX_SEQ_LENGTH:
        raise ModelError(f"the model takes sequences of {fixed_len} tokens; BERT on SQuAD "
                         f"uses {MAX_SEQ_LENGTH}", hint="export the model for 384 tokens or with a "
                         "dynamic sequence axis")
    if mode == "auto":
        return "fixed" if fixed_len else "dynamic"
    if mode == "dynamic" and fixed_len:
        raise ConfigError(f"the model declares a fixed sequence length of {fixed_len}, so "
                          "batches cannot be cut to their longest sequence",
                          hint="drop sequence_length=dynamic, or export the model with a dynamic "
                          "sequence axis")
    return mode


def _dataset_questions(dataset: Path) -> list[tuple[str, list[str]]]:
    """Every question of the file with its gold answers, in the evaluate script's order."""
    data = load_squad(dataset)
    return [(qa["id"], [a["text"] for a in qa["answers"]])
            for article in data["data"] for p in article["paragraphs"] for qa in p["qas"]]


class BertOptions(Options):
    """``--task-option`` keys of bert-99 / bert-99.9."""

    sequence_length: Literal["auto", "dynamic", "fixed"] = "auto"
    #: dynamic: batch widths are multiples of it (1: each batch cut to its longest exactly)
    sequence_step: int = SEQUENCE_STEP


def create_bert(name: str, options: TaskOptions) -> BertSquadTask:
    """``bert-99`` / ``bert-99.9``: needs --dataset dev-v1.1.json and --vocab vocab.txt."""
    opts = options.parsed(BertOptions)
    if options.dataset is None:
        raise DatasetError(f"{name} needs --dataset", hint="pass --dataset path/to/dev-v1.1.json")
    if options.vocab is None:
        raise DatasetError(f"{name} needs --vocab", hint="pass --vocab path/to/vocab.txt")
    return BertSquadTask(name, Path(options.dataset), Path(options.vocab), options.cache_dir,
                         options.max_samples,
                         opts.sequence_length, options.model_inputs, opts.sequence_step,
                         options.require_rules(name))
