"""The two official PyTorch architectures, written out so their state dicts load key for key.

* ``BertForQA``: ``transformers.BertForQuestionAnswering`` as ``language/bert/pytorch_SUT.py``
  builds it from ``bert_config.json`` (module names ``bert.embeddings.*``,
  ``bert.encoder.layer.N.*``, ``qa_outputs``; no pooler), so the fine-tuned ``model.pytorch``
  loads without transformers.
* ``Bf16Autocast``: either of them run under bf16 autocast as a module of its own, so that
  ``torch.export`` keeps the autocast region in the program (a bf16 package).
* ``resnet50``: torchvision's ResNet-50 (v1.5: stride on the 3x3 conv; ``conv1``, ``bn1``,
  ``layerN.M.{conv,bn}{1,2,3}``, ``downsample.{0,1}``, ``fc``), so torchvision's weights file
  loads without torchvision (whose PyPI build does not import beside torch 2.13).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

# ---- BERT --------------------------------------------------------------------------------------

#: bert_config.json keys the model needs (the official file has these and a few more)
BERT_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
             "vocab_size", "max_position_embeddings", "type_vocab_size")


def read_bert_config(path: Path) -> dict[str, Any]:
    config = json.loads(Path(path).read_text())
    missing = [k for k in BERT_KEYS if k not in config]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(missing)}")
    return config


class _Dense(nn.Module):
    """``dense`` + optional ``LayerNorm`` as HF names them (``*.output.dense``/``LayerNorm``)."""

    def __init__(self, n_in: int, n_out: int, norm: bool, eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(n_in, n_out)
        if norm:
            self.LayerNorm = nn.LayerNorm(n_out, eps=eps)


class _SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        n, length, hidden = x.shape
        split = (n, length, self.heads, hidden // self.heads)
        q, k, v = (m(x).view(split).transpose(1, 2) for m in (self.query, self.key, self.value))
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return ctx.transpose(1, 2).reshape(n, length, hidden)


class _Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, eps: float) -> None:
        super().__init__()
        self.self = _SelfAttention(hidden, heads)
        self.output = _Dense(hidden, hidden, True, eps)


class _Layer(nn.Module):
    def __init__(self, c: dict[str, Any], eps: float) -> None:
        super().__init__()
        self.attention = _Attention(c["hidden_size"], c["num_attention_heads"], eps)
        self.intermediate = _Dense(c["hidden_size"], c["intermediate_size"], False, eps)
        self.output = _Dense(c["intermediate_size"], c["hidden_size"], True, eps)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        a = self.attention
        x = a.output.LayerNorm(x + a.output.dense(a.self(x, bias)))
        h = F.gelu(self.intermediate.dense(x))
        return self.output.LayerNorm(x + self.output.dense(h))


class _Embeddings(nn.Module):
    def __init__(self, c: dict[str, Any], eps: float) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.position_embeddings = nn.Embedding(c["max_position_embeddings"], c["hidden_size"])
        self.token_type_embeddings = nn.Embedding(c["type_vocab_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=eps)

    def forward(self, ids: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)[None]
        return self.LayerNorm(self.word_embeddings(ids) + self.position_embeddings(pos)
                              + self.token_type_embeddings(segments))


class _Encoder(nn.Module):
    def __init__(self, c: dict[str, Any], eps: float) -> None:
        super().__init__()
        self.layer = nn.ModuleList(_Layer(c, eps) for _ in range(c["num_hidden_layers"]))


class _Bert(nn.Module):
    def __init__(self, c: dict[str, Any], eps: float) -> None:
        super().__init__()
        self.embeddings = _Embeddings(c, eps)
        self.encoder = _Encoder(c, eps)


class BertForQA(nn.Module):
    """(input_ids, input_mask, segment_ids) int64 [N, L] -> start, end logits [N, L]."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        eps = float(config.get("layer_norm_eps", 1e-12))
        self.bert = _Bert(config, eps)
        self.qa_outputs = nn.Linear(config["hidden_size"], 2)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor,
                segments: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.bert.embeddings(ids, segments)
        # additive mask over keys, as BERT's extended attention mask: 0 or -10000
        bias = ((1.0 - mask[:, None, None, :].to(x.dtype)) * -10000.0)
        for layer in self.bert.encoder.layer:
            x = layer(x, bias)
        logits = self.qa_outputs(x)
        return logits[..., 0], logits[..., 1]


# ---- ResNet-50 ---------------------------------------------------------------------------------

class _Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.downsample = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                         nn.BatchNorm2d(cout))
                           if stride != 1 or cin != cout else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    """torchvision's ResNet with bottleneck blocks; ``resnet50()`` is layers (3, 4, 6, 3)."""

    def __init__(self, layers: tuple[int, ...] = (3, 4, 6, 3), classes: int = 1000,
                 base: int = 64) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, base, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(base)
        cin = base
        for i, blocks in enumerate(layers):
            width = base * 2 ** i
            stage = []
            for j in range(blocks):
                stage.append(_Bottleneck(cin, width, 2 if (j == 0 and i > 0) else 1))
                cin = width * 4
            setattr(self, f"layer{i + 1}", nn.Sequential(*stage))
        self.n_stages = len(layers)
        self.fc = nn.Linear(cin, classes)
        for m in self.modules():  # torchvision's init, so random weights give O(1) activations
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        for i in range(self.n_stages):
            x = getattr(self, f"layer{i + 1}")(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet50(classes: int = 1000) -> ResNet:
    return ResNet((3, 4, 6, 3), classes)


def resnet_from_state(state: dict[str, torch.Tensor]) -> ResNet:
    """A ResNet shaped like ``state`` (blocks per stage, width, classes read from its keys)."""
    layers = []
    i = 1
    while f"layer{i}.0.conv1.weight" in state:
        layers.append(1 + max(int(k.split(".")[1]) for k in state if k.startswith(f"layer{i}.")))
        i += 1
    base = state["conv1.weight"].shape[0]
    return ResNet(tuple(layers), state["fc.weight"].shape[0], base)


def bf16_autocast() -> Any:
    """The autocast every bf16 run of these models is under (bf16 matmuls/convolutions through
    oneDNN: AMX or AVX512_BF16)."""
    return torch.autocast("cpu", dtype=torch.bfloat16)


class Bf16Autocast(nn.Module):
    """``inner`` under :func:`bf16_autocast`: exported, the program keeps the autocast region
    (an autocast entered around ``torch.export`` is not recorded)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *inputs: torch.Tensor) -> Any:
        with bf16_autocast():
            return self.inner(*inputs)
