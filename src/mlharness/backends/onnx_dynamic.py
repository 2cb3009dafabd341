"""Give a BERT ONNX model a dynamic sequence axis, and prove it still computes the same logits.

The official ``model.onnx`` declares [batch, 384] inputs (``bert_tf_to_pytorch.py`` exports only
the batch axis as dynamic) although the traced graph computes its shapes at run time. This tool
renames the sequence dimension of the inputs and outputs to a symbol, then checks with
onnxruntime that a feature cut to its real length gives the same logits on its real tokens as the
384-padded original. Only the declared shapes change: weights and nodes are untouched.

    python -m mlharness.backends.onnx_dynamic model.onnx model_dynamic.onnx
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from mlharness.errors import ModelError

SEQ_SYMBOL = "sequence_length"


def make_dynamic(source: Path, target: Path, seq_axis: int = 1) -> None:
    """Write ``target``: ``source`` with the sequence axis of every input/output made symbolic."""
    import onnx

    model = onnx.load(str(source))
    for value in list(model.graph.input) + list(model.graph.output):
        dims = value.type.tensor_type.shape.dim
        if len(dims) > seq_axis:
            dims[seq_axis].Clear()
            dims[seq_axis].dim_param = SEQ_SYMBOL
    onnx.save(model, str(target))


def check_equivalent(original: Path, dynamic: Path, lengths: tuple[int, ...] = (37, 128, 301),
                     atol: float = 1e-3, seed: int = 0) -> float:
    """Largest |difference| of the logits on real tokens; ModelError when above ``atol``."""
    import onnxruntime as ort

    rng = np.random.default_rng(seed)
    full = ort.InferenceSession(str(original), providers=["CPUExecutionProvider"])
    cut = ort.InferenceSession(str(dynamic), providers=["CPUExecutionProvider"])
    seq = full.get_inputs()[0].shape[1]
    seq = seq if isinstance(seq, int) else 384
    worst = 0.0
    for n in lengths:
        ids = np.zeros((1, seq), np.int64)
        ids[0, :n] = rng.integers(1000, 2000, n)
        mask = np.zeros((1, seq), np.int64)
        mask[0, :n] = 1
        segments = np.zeros((1, seq), np.int64)
        segments[0, n // 2:n] = 1
        feeds = {"input_ids": ids, "input_mask": mask, "segment_ids": segments}
        try:
            a = full.run(None, feeds)
            b = cut.run(None, {k: v[:, :n] for k, v in feeds.items()})
        except Exception as exc:  # onnxruntime raises its own types
            raise ModelError(f"the model does not run at length {n}: {exc}".splitlines()[0],
                             hint="it has the sequence length built in; use sequence_length=fixed"
                             ) from None
        for x, y in zip(a, b):
            worst = max(worst, float(np.abs(x[:, :n] - y[:, :n]).max()))
    if worst > atol:
        raise ModelError(f"logits differ by {worst:.2e} when the sequence is cut",
                         hint="the model depends on padded positions; use sequence_length=fixed")
    return worst


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", type=Path)
    p.add_argument("target", type=Path)
    args = p.parse_args(argv)
    make_dynamic(args.source, args.target)
    try:
        worst = check_equivalent(args.source, args.target)
    except ModelError as exc:
        args.target.unlink(missing_ok=True)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.target}: same logits on real tokens (max |diff| {worst:.1e})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
