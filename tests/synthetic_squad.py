"""Synthetic SQuAD v1.1 data, a vocab covering it, and a random-weight BERT-shaped ONNX model.

Nothing here is real data: the json follows the official schema (articles -> paragraphs ->
context + qas with answers and character offsets), some contexts are long enough to need several
doc-stride windows, and the text mixes punctuation, accents, CJK characters, control characters
and words outside the vocab so the tokenizer's corners are exercised. The model has the official
signature (``input_ids``, ``input_mask``, ``segment_ids`` int64 [N, L]; start/end logits out).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

WORDS = (
    "the of and to in a is was for on as by with from that at his her it an were are which "
    "this be also or first new has had one their its after who two they not but been may "
    "city river music school war state government century university national world team "
    "church population empire system water island north south east west king army league "
    "family history language species film album company series station building party "
    "council college museum energy theory region market power law court union force "
    "computer network engine design process signal period temple bridge harbour railway "
    "economy culture science culture treaty colony republic province parliament election "
    "victoria normandy normans tesla edison amazon rhine warsaw kenya huguenots oxygen "
    "apollo genghis khan yuan dynasty luther sermon immune pathogen packet teaching "
    "constitution construction economic inequality scottish geology chloroplasts "
    "jacksonville southern california fresno ctenophora imperialism pharmacy civil "
    "disobedience private schools steam engines islamism prime numbers rhine harvard"
).split()
NAMES = ["Frédéric Chopin", "Nikola Tesla", "São Paulo", "Zürich", "Genghis Khan",
         "Kublai Khan", "Martin Luther", "Marie Curie", "Ångström", "Dvořák", "Beyoncé"]
EXTRAS = ["(1895–1943)", "Smith's", "U.S.", "e.g.", "$1,000", "3.5%", "naïve", "café",
          "北京", "東京都", "co-operation", "don't", "A-League", "\u00adsoft", "☃snow",
          "x\u0007y", "Ελλάδα", "ΟΔΟΣ", "İstanbul", "supercalifragilisticexpialidocious",
          "a" * 120, "[MASK]", "well-known", "#hashtag", "email@example.com"]


def _sentence(rng: random.Random) -> str:
    n = rng.randint(8, 22)
    words = [rng.choice(WORDS) for _ in range(n)]
    if rng.random() < 0.5:
        words.insert(rng.randrange(len(words)), rng.choice(NAMES))
    if rng.random() < 0.4:
        words.insert(rng.randrange(len(words)), rng.choice(EXTRAS))
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words)), str(rng.randint(1, 2024)))
    text = " ".join(words)
    if rng.random() < 0.3:
        text = text.replace(" ", ", ", 1)
    return text[0].upper() + text[1:] + rng.choice([".", ".", ".", "!", "?", ";"])


def _paragraph(rng: random.Random, n_words: int) -> str:
    sentences: list[str] = []
    while sum(len(s.split()) for s in sentences) < n_words:
        sentences.append(_sentence(rng))
    sep = rng.choice([" ", " ", "  ", "\n", " \u202f"])
    return sep.join(sentences)


def _qa(rng: random.Random, context: str, qid: str) -> dict:
    spans = [(m, m + len(w)) for m, w in _word_offsets(context)]
    i = rng.randrange(len(spans))
    j = min(len(spans) - 1, i + rng.randint(0, 3))
    start, end = spans[i][0], spans[j][1]
    text = context[start:end]
    answers = [{"answer_start": start, "text": text}]
    if rng.random() < 0.6:  # a second annotator picking a shorter span
        answers.append({"answer_start": spans[i][0], "text": context[spans[i][0]:spans[i][1]]})
    before = context[max(0, start - 60):start].split()[-4:]
    q_words = ["What", *before, rng.choice(WORDS), rng.choice(["is", "was", "did"]),
               rng.choice(WORDS)]
    question = " ".join(q_words) + "?"
    if rng.random() < 0.05:  # an overlong question, cut to 64 word pieces
        question = " ".join(rng.choice(WORDS) for _ in range(90)) + "?"
    return {"answers": answers, "question": question, "id": qid}


def _word_offsets(text: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    pos = 0
    for word in text.split():
        pos = text.index(word, pos)
        out.append((pos, word))
        pos += len(word)
    return out


def make_squad(path: Path, articles: int = 4, paragraphs: int = 3, questions: int = 4,
               seed: int = 0, long_every: int = 3, short_words: tuple[int, int] = (25, 110)
               ) -> Path:
    """Write a SQuAD v1.1 json; every ``long_every``-th paragraph is long (several windows).

    Short paragraphs have ``short_words`` words (real SQuAD contexts average ~120 words).
    """
    rng = random.Random(seed)
    data = []
    qn = 0
    for a in range(articles):
        paras = []
        for p in range(paragraphs):
            long = (a * paragraphs + p) % long_every == 1
            context = _paragraph(rng, rng.randint(380, 700) if long else rng.randint(*short_words))
            qas = []
            for _ in range(questions):
                qas.append(_qa(rng, context, f"{seed:02d}{qn:022x}"))
                qn += 1
            paras.append({"context": context, "qas": qas})
        data.append({"title": f"Synthetic_article_{a}", "paragraphs": paras})
    path.write_text(json.dumps({"data": data, "version": "1.1"}), encoding="utf-8")
    return path


def make_vocab(path: Path, squad: Path | list[Path], seed: int = 0,
               whole_word_share: float = 0.8) -> Path:
    """A vocab in the official layout ([PAD]=0, [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103).

    Most words are whole entries; the rest must be split into pieces; "☃" is left out so
    words holding it become [UNK].
    """
    from mlharness.tasks.question_answering.tokenization import basic_tokenize

    rng = random.Random(seed)
    texts = []
    for one in squad if isinstance(squad, list) else [squad]:
        for article in json.loads(one.read_text(encoding="utf-8"))["data"]:
            for p in article["paragraphs"]:
                texts.append(p["context"])
                texts.extend(qa["question"] for qa in p["qas"])
    words: list[str] = []
    seen: set[str] = set()
    for text in texts:
        for w in basic_tokenize(text):
            if w not in seen:
                seen.add(w)
                words.append(w)
    chars = sorted({c for w in words for c in w} - {"☃"})
    tokens = ["[PAD]", *[f"[unused{i}]" for i in range(99)], "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    entries: list[str] = []
    for w in words:
        if "☃" in w:
            continue
        if rng.random() < whole_word_share:
            entries.append(w)
        elif len(w) > 3:
            entries.append(w[:3])
            entries.append("##" + w[3:5])
    entries += chars + ["##" + c for c in chars]
    for e in entries:
        if e not in tokens:
            tokens.append(e)
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return path


def make_bert_onnx(path: Path, vocab_size: int, layers: int = 2, hidden: int = 64,
                   heads: int = 4, intermediate: int = 128, max_positions: int = 512,
                   fixed_seq: int | None = None, single_output: bool = False,
                   seed: int = 0, weights: dict[str, np.ndarray] | None = None) -> Path:
    """A BERT encoder + QA head in ONNX (opset 17), official input/output names; random weights
    unless ``weights`` (by initializer name, see ``checkpoint_names``) are given."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def weight(name: str, *shape: int, std: float = 0.02, value: float | None = None) -> str:
        if weights is not None:
            arr = np.asarray(weights[name], np.float32)
            assert arr.shape == shape, (name, arr.shape, shape)
        else:
            arr = (np.full(shape, value, np.float32) if value is not None
                   else rng.standard_normal(shape, dtype=np.float32) * std)
        inits.append(numpy_helper.from_array(arr, name))
        return name

    def const(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(arr, name))
        return name

    def node(op: str, inputs: list[str], name: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def layer_norm(x: str, prefix: str) -> str:
        return node("LayerNormalization", [x, weight(f"{prefix}.g", hidden, value=1.0),
                                           weight(f"{prefix}.b", hidden, value=0.0)],
                    f"{prefix}.out", axis=-1, epsilon=1e-12)

    def dense(x: str, prefix: str, n_in: int, n_out: int) -> str:
        y = node("MatMul", [x, weight(f"{prefix}.w", n_in, n_out)], f"{prefix}.mm")
        return node("Add", [y, weight(f"{prefix}.bias", n_out)], f"{prefix}.out")

    head_dim = hidden // heads
    seq = fixed_seq if fixed_seq else "seq"
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", seq])
              for n in ("input_ids", "input_mask", "segment_ids")]
    word = node("Gather", [weight("emb.word", vocab_size, hidden), "input_ids"], "emb.w")
    typ = node("Gather", [weight("emb.type", 2, hidden), "segment_ids"], "emb.t")
    shape = node("Shape", ["input_ids"], "ids.shape")
    seq_len = node("Gather", [shape, const("c.one", np.array(1, np.int64))], "ids.seq", axis=0)
    positions = node("Range", [const("c.zero", np.array(0, np.int64)), seq_len,
                               const("c.step", np.array(1, np.int64))], "pos.ids")
    pos = node("Gather", [weight("emb.pos", max_positions, hidden), positions], "emb.p")
    x = node("Add", [node("Add", [word, typ], "emb.wt"), pos], "emb.sum")
    x = layer_norm(x, "emb.ln")
    mask_f = node("Cast", ["input_mask"], "mask.f", to=TensorProto.FLOAT)
    neg = node("Mul", [node("Sub", [const("c.onef", np.array(1.0, np.float32)), mask_f],
                            "mask.inv"), const("c.neg", np.array(-10000.0, np.float32))],
               "mask.neg")
    bias = node("Unsqueeze", [neg, const("c.axes", np.array([1, 2], np.int64))], "mask.bias")
    split_shape = const("c.split", np.array([0, 0, heads, head_dim], np.int64))
    merge_shape = const("c.merge", np.array([0, 0, hidden], np.int64))
    scale = const("c.scale", np.array(1.0 / np.sqrt(head_dim), np.float32))
    for i in range(layers):
        p = f"l{i}"
        q = node("Transpose", [node("Reshape", [dense(x, f"{p}.q", hidden, hidden), split_shape],
                                    f"{p}.qr")], f"{p}.qt", perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [dense(x, f"{p}.k", hidden, hidden), split_shape],
                                    f"{p}.kr")], f"{p}.kt", perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [dense(x, f"{p}.v", hidden, hidden), split_shape],
                                    f"{p}.vr")], f"{p}.vt", perm=[0, 2, 1, 3])
        scores = node("Add", [node("Mul", [node("MatMul", [q, k], f"{p}.qk"), scale], f"{p}.sc"),
                              bias], f"{p}.masked")
        probs = node("Softmax", [scores], f"{p}.probs", axis=-1)
        ctx = node("MatMul", [probs, v], f"{p}.ctx")
        ctx = node("Reshape", [node("Transpose", [ctx], f"{p}.ctxt", perm=[0, 2, 1, 3]),
                               merge_shape], f"{p}.ctxm")
        x = layer_norm(node("Add", [x, dense(ctx, f"{p}.o", hidden, hidden)], f"{p}.res1"),
                       f"{p}.ln1")
        h = dense(x, f"{p}.ff1", hidden, intermediate)
        erf = node("Erf", [node("Mul", [h, const(f"{p}.c.isq2", np.array(1 / np.sqrt(2), np.float32))],
                                f"{p}.hs")], f"{p}.erf")
        gelu = node("Mul", [node("Mul", [h, const(f"{p}.c.half", np.array(0.5, np.float32))],
                                 f"{p}.hh"),
                            node("Add", [erf, const(f"{p}.c.onef", np.array(1.0, np.float32))],
                                 f"{p}.erf1")], f"{p}.gelu")
        x = layer_norm(node("Add", [x, dense(gelu, f"{p}.ff2", intermediate, hidden)],
                            f"{p}.res2"), f"{p}.ln2")
    logits = dense(x, "qa", hidden, 2)
    if single_output:
        nodes.append(helper.make_node("Identity", [logits], ["logits"]))
        outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", seq, 2])]
    else:
        nodes.append(helper.make_node("Split", [logits, const("c.splits", np.array([1, 1], np.int64))],
                                      ["qa.s", "qa.e"], axis=2))
        axes2 = const("c.axis2", np.array([2], np.int64))
        nodes.append(helper.make_node("Squeeze", ["qa.s", axes2], ["output_start_logits"]))
        nodes.append(helper.make_node("Squeeze", ["qa.e", axes2], ["output_end_logits"]))
        outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", seq])
                   for n in ("output_start_logits", "output_end_logits")]
    graph = helper.make_graph(nodes, "bert_squad_random", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="mlharness-tests")
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def checkpoint_names(layers: int) -> list[tuple[str, str, bool]]:
    """(``make_bert_onnx`` initializer, BertForQuestionAnswering state-dict key, transposed)."""
    out = [("emb.word", "bert.embeddings.word_embeddings.weight", False),
           ("emb.pos", "bert.embeddings.position_embeddings.weight", False),
           ("emb.type", "bert.embeddings.token_type_embeddings.weight", False),
           ("emb.ln.g", "bert.embeddings.LayerNorm.weight", False),
           ("emb.ln.b", "bert.embeddings.LayerNorm.bias", False),
           ("qa.w", "qa_outputs.weight", True), ("qa.bias", "qa_outputs.bias", False)]
    names = {"q": "attention.self.query", "k": "attention.self.key",
             "v": "attention.self.value", "o": "attention.output.dense",
             "ff1": "intermediate.dense", "ff2": "output.dense"}
    for i in range(layers):
        p, q = f"l{i}", f"bert.encoder.layer.{i}."
        for short, long in names.items():
            out += [(f"{p}.{short}.w", q + long + ".weight", True),
                    (f"{p}.{short}.bias", q + long + ".bias", False)]
        for ln, long in (("ln1", "attention.output.LayerNorm"), ("ln2", "output.LayerNorm")):
            out += [(f"{p}.{ln}.g", q + long + ".weight", False),
                    (f"{p}.{ln}.b", q + long + ".bias", False)]
    return out


def onnx_weights(state: dict, layers: int) -> dict[str, np.ndarray]:
    """A BertForQuestionAnswering state dict as ``make_bert_onnx(weights=...)`` takes it."""
    out = {}
    for onnx_name, key, transposed in checkpoint_names(layers):
        arr = state[key].detach().float().numpy()
        out[onnx_name] = arr.T if transposed else arr
    return out


def bert_checkpoint(onnx_path: Path, folder: Path, layers: int, hidden: int, heads: int,
                    intermediate: int, vocab: int) -> Path:
    """The official PyTorch format of ``make_bert_onnx``'s model: ``folder/model.pytorch`` (a
    state dict under BertForQuestionAnswering's names, old gamma/beta LayerNorm names in the
    embeddings, an unused pooler as in the real file) and ``folder/bert_config.json``."""
    import onnx
    import torch
    from onnx import numpy_helper

    w = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(onnx_path)).graph.initializer}
    state = {key: torch.from_numpy(np.array(w[name].T if transposed else w[name]))
             for name, key, transposed in checkpoint_names(layers)}
    for old, new in (("gamma", "weight"), ("beta", "bias")):
        state[f"bert.embeddings.LayerNorm.{old}"] = state.pop(f"bert.embeddings.LayerNorm.{new}")
    state["bert.pooler.dense.weight"] = torch.zeros(hidden, hidden)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(state, folder / "model.pytorch")
    (folder / "bert_config.json").write_text(json.dumps({
        "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
        "hidden_size": hidden, "initializer_range": 0.02, "intermediate_size": intermediate,
        "max_position_embeddings": int(w["emb.pos"].shape[0]), "num_attention_heads": heads,
        "num_hidden_layers": layers, "type_vocab_size": 2, "vocab_size": vocab}))
    return folder / "model.pytorch"


def vocab_size(path: Path) -> int:
    return sum(1 for _ in Path(path).open(encoding="utf-8"))


def make_all(folder: Path, **model_kwargs) -> tuple[Path, Path, Path]:
    """(dev json, vocab, model) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    squad = make_squad(folder / "dev-v1.1.json")
    vocab = make_vocab(folder / "vocab.txt", squad)
    model = make_bert_onnx(folder / "bert.onnx", vocab_size(vocab), **model_kwargs)
    return squad, vocab, model
