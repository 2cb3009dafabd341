"""A small TRAINED BERT with decisive outputs, for judging reduced precision on question answering.

Random weights give near-tied start/end logits, so whether bf16 or int8 keeps F1 says little on
them. Here a 2-layer BERT (``BertForQA``, the pytorch backend's module, so its state dict has the
official checkpoint names) is trained in about a minute on synthetic SQuAD v1.1 questions that
need the question to be read: every context holds a person (two words), a year and a place among
filler sentences and one distracting small number, and "who / in what year / where" questions ask
for one of them. The features are built by the harness's own tokenizer and windowing, so the model
sees exactly what a run feeds it.

``make_trained_bert(root)`` returns the dev set (official schema), the vocab, the ONNX model
(official signature) and the official PyTorch format (``model.pytorch`` + ``bert_config.json``);
all are built once under ``root``.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from synthetic_squad import (WORDS, bert_checkpoint, make_bert_onnx, make_vocab, onnx_weights,
                             vocab_size)

FIRST = ["Nikola", "Marie", "Martin", "Ada", "Alan", "Frédéric", "Kublai", "Isaac", "Grace",
         "Niels", "Rosalind", "Srinivasa", "Emmy", "Antonín", "Hypatia", "Ibn", "Wangari", "Zhang"]
LAST = ["Tesla", "Curie", "Luther", "Lovelace", "Turing", "Chopin", "Khan", "Newton", "Hopper",
        "Bohr", "Franklin", "Ramanujan", "Noether", "Dvořák", "Battuta", "Maathai", "Heng", "Sagan"]
PLACES = ["Lisbon", "Kyoto", "Nairobi", "Quebec", "Valparaíso", "Reykjavík", "Kraków", "Dublin",
          "Manila", "Oslo", "Lima", "Perth", "São Paulo", "New Delhi", "Cape Town", "Buenos Aires",
          "Zürich", "Hanoi"]
VERBS = ["founded", "visited", "described", "built", "studied", "opened", "named", "defended"]
QUESTIONS = {  # kind -> templates; {a} {b} filler words, {v} a verb
    "who": ["Who {v} the {a} {b}?", "Which person {v} the {a}?", "Who was it that {v} {a} {b}?"],
    "year": ["In what year was the {a} {b} {v}?", "When was the {a} {v}?",
             "What year did the {a} {b} get {v}?"],
    "place": ["Where was the {a} {v}?", "In which city was the {a} {b} {v}?",
              "Where did the {a} {b} get {v}?"],
}
FILLER = [w for w in WORDS if w.isalpha()]

#: model shape: small enough to train in a minute on two cores, deep enough to need attention
SHAPE = {"layers": 2, "hidden": 128, "heads": 4, "intermediate": 512}


def _paragraph(rng: random.Random) -> tuple[str, dict[str, str]]:
    facts = {"who": f"{rng.choice(FIRST)} {rng.choice(LAST)}", "year": str(rng.randint(1000, 2024)),
             "place": rng.choice(PLACES), "small": str(rng.randint(2, 99))}
    sentences = [[rng.choice(FILLER) for _ in range(rng.randint(5, 12))]
                 for _ in range(rng.randint(3, 5))]
    for text in facts.values():  # each fact inside a sentence, never last (no punctuation)
        words = sentences[rng.randrange(len(sentences))]
        words.insert(rng.randrange(len(words)), text)
    text = " ".join((lambda s: s[0].upper() + s[1:])(" ".join(w)) + "." for w in sentences)
    return text, facts


def make_qa_squad(path: Path, paragraphs: int, seed: int) -> Path:
    """A SQuAD v1.1 json: ``paragraphs`` contexts with one who/year/place question each."""
    rng = random.Random(seed)
    data, n = [], 0
    for a in range(0, paragraphs, 10):
        paras = []
        for _ in range(min(10, paragraphs - a)):
            context, facts = _paragraph(rng)
            qas = []
            for kind in ("who", "year", "place"):
                question = rng.choice(QUESTIONS[kind]).format(
                    a=rng.choice(FILLER), b=rng.choice(FILLER), v=rng.choice(VERBS))
                # whole words only: "12" is not the end of "1912"
                start = re.search(rf"(?<!\S){re.escape(facts[kind])}(?!\S)", context).start()
                qas.append({"id": f"{seed:02d}{n:022x}", "question": question,
                            "answers": [{"answer_start": start, "text": facts[kind]}]})
                n += 1
            paras.append({"context": context, "qas": qas})
        data.append({"title": f"Trained_fixture_{a // 10}", "paragraphs": paras})
    path.write_text(json.dumps({"data": data, "version": "1.1"}), encoding="utf-8")
    return path


@dataclass
class TrainingSet:
    ids: np.ndarray
    mask: np.ndarray
    segments: np.ndarray
    start: np.ndarray
    end: np.ndarray


def _training_arrays(squad: Path, vocab: Path) -> TrainingSet:
    """Features as a run builds them, with the answer's first and last word piece."""
    from mlharness.tasks.question_answering.features import build_features
    from mlharness.tasks.question_answering.squad import read_examples, split_context
    from mlharness.tasks.question_answering.tokenization import WordPieceTokenizer

    examples = read_examples(squad)
    features = build_features(examples, WordPieceTokenizer.from_file(vocab))
    spans = []
    for article in json.loads(squad.read_text(encoding="utf-8"))["data"]:
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                a = qa["answers"][0]
                first = len(split_context(p["context"][:a["answer_start"]]))
                spans.append((first, first + len(split_context(a["text"])) - 1))
    keep, starts, ends = [], [], []
    for row, example in enumerate(features.example_index):
        first, last = spans[example]
        where_first = np.flatnonzero(features.token_to_orig[row] == first)
        where_last = np.flatnonzero(features.token_to_orig[row] == last)
        if len(where_first) and len(where_last):
            keep.append(row)
            starts.append(where_first[0])
            ends.append(where_last[-1])
    length = int(features.seq_len[keep].max())
    return TrainingSet(features.input_ids[keep, :length].astype(np.int64),
                   features.input_mask[keep, :length].astype(np.int64),
                   features.segment_ids[keep, :length].astype(np.int64),
                   np.asarray(starts), np.asarray(ends))


def train(data: TrainingSet, config: dict, epochs: int = 30, seed: int = 0,
          threads: int | None = None) -> dict:
    """Train ``BertForQA`` on ``data`` with ``threads`` torch threads (None: torch's own);
    return its state dict."""
    import torch

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _train(data, config, epochs, seed)
    finally:
        torch.set_num_threads(before)


def _train(data: TrainingSet, config: dict, epochs: int, seed: int) -> dict:
    import torch

    from mlharness.backends.torch_models import BertForQA

    torch.manual_seed(seed)
    model = BertForQA(config)
    for name, param in model.named_parameters():  # BERT's initialisation
        if name.endswith("weight") and param.dim() == 2:
            torch.nn.init.normal_(param, std=0.02)
    t = {k: torch.from_numpy(getattr(data, k)) for k in ("ids", "mask", "segments", "start", "end")}
    steps = epochs * ((len(data.ids) + 31) // 32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=steps,
                                                pct_start=0.1)
    loss_fn = torch.nn.functional.cross_entropy
    lengths = data.mask.sum(axis=1)
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        # runs of 8 batches sorted by length, so each batch is cut near its own length
        perm = rng.permutation(len(data.ids))
        runs = [sorted(perm[i:i + 256], key=lambda j: lengths[j])
                for i in range(0, len(perm), 256)]
        batches = [np.asarray(r[i:i + 32]) for r in runs for i in range(0, len(r), 32)]
        for b in (batches[i] for i in rng.permutation(len(batches))):
            idx, cut = torch.from_numpy(b), int(lengths[b].max())
            ids, mask, segments = (t[k][idx, :cut] for k in ("ids", "mask", "segments"))
            start, end = model(ids, mask, segments)
            masked = (1 - mask) * -10000.0
            loss = (loss_fn(start + masked, t["start"][idx])
                    + loss_fn(end + masked, t["end"][idx]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    return model.state_dict()


@dataclass
class TrainedBert:
    squad: Path  # the dev set (official SQuAD v1.1 schema)
    vocab: Path
    onnx: Path  # official signature: input_ids/input_mask/segment_ids -> start/end logits
    checkpoint: Path  # model.pytorch, bert_config.json beside it


def make_trained_bert(root: Path, train_paragraphs: int = 600, dev_paragraphs: int = 400,
                      epochs: int = 20, layers: int | None = None,
                      threads: int | None = None) -> TrainedBert:
    """Build (once) and return the trained fixture under ``root``. ``dev_paragraphs=0`` makes
    the dev set the training set: a model that has learnt its questions by heart is decisive on
    them after far fewer steps (for tests, which judge reduced precision, not generalisation).
    ``layers`` overrides :data:`SHAPE`'s (one layer: half the training and compiling);
    ``threads``: torch threads for the training (1 in tests: on a machine whose cores are all
    busy, two threads train at half the speed of one)."""
    shape = {**SHAPE, "layers": layers or SHAPE["layers"]}
    root.mkdir(parents=True, exist_ok=True)
    out = TrainedBert(root / "dev-v1.1.json", root / "vocab.txt", root / "trained_bert.onnx",
                      root / "pytorch" / "model.pytorch")
    if out.onnx.is_file() and out.checkpoint.is_file():
        return out
    train_set = make_qa_squad(root / "train-v1.1.json", train_paragraphs, seed=11)
    if dev_paragraphs:
        make_qa_squad(out.squad, dev_paragraphs, seed=12)
    else:
        out.squad.write_bytes(train_set.read_bytes())
    make_vocab(out.vocab, [train_set, out.squad], whole_word_share=0.85)
    vocab = vocab_size(out.vocab)
    config = {"hidden_size": shape["hidden"], "num_hidden_layers": shape["layers"],
              "num_attention_heads": shape["heads"], "intermediate_size": shape["intermediate"],
              "vocab_size": vocab, "max_position_embeddings": 512, "type_vocab_size": 2}
    state = train(_training_arrays(train_set, out.vocab), config, epochs, threads=threads)
    make_bert_onnx(out.onnx, vocab, weights=onnx_weights(state, shape["layers"]), **shape)
    bert_checkpoint(out.onnx, out.checkpoint.parent, shape["layers"], shape["hidden"],
                    shape["heads"], shape["intermediate"], vocab)
    return out
