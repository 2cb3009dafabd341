"""Model inputs per batch and the (384, 2) float32 response bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlharness.errors import ConfigError, ModelError
from mlharness.tasks.question_answering.task import BertSquadTask
from synthetic_squad import make_squad, make_vocab


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("bert")
    squad = make_squad(root / "dev-v1.1.json", articles=2, seed=8)
    return squad, make_vocab(root / "vocab.txt", squad), root / "cache"


def task(files: tuple[Path, Path, Path], mode: str = "dynamic") -> BertSquadTask:
    return BertSquadTask("bert-99", *files, sequence_length=mode)


def test_batch_inputs_dynamic_and_fixed(files: tuple[Path, Path, Path]) -> None:
    dyn, fixed = task(files), task(files, "fixed")
    exact = BertSquadTask("bert-99", *files, sequence_length="dynamic", sequence_step=1)
    lengths = dyn.features.seq_len
    rows = [int(np.argmin(lengths)), int(np.argmax(lengths < 300))]
    longest = int(lengths[rows].max())
    width = -(-longest // 32) * 32  # the default step rounds the width up to a multiple of 32
    assert width % 32 == 0 and longest <= width < longest + 32
    batch = dyn.batch_inputs(rows)
    assert set(batch) == {"input_ids", "input_mask", "segment_ids"}
    assert all(v.dtype == np.int64 and v.shape == (2, width) for v in batch.values())
    assert (batch["input_ids"] == dyn.features.input_ids[rows, :width]).all()
    assert (batch["input_mask"][:, longest:] == 0).all()  # the extra columns are padding
    assert all(v.shape == (2, longest) for v in exact.batch_inputs(rows).values())
    assert all(v.shape == (2, 384) for v in fixed.batch_inputs(rows).values())
    assert dyn.sample_length(rows[0]) == lengths[rows[0]]
    assert dyn.describe()["sequence_step"] == 32 and "sequence_step" not in fixed.describe()
    with pytest.raises(ConfigError, match="sequence_step must be 1..384"):
        BertSquadTask("bert-99", *files, sequence_length="dynamic", sequence_step=0)


def test_warmup_batches_cover_every_width(files: tuple[Path, Path, Path]) -> None:
    """One batch per width the features need, widest first; fixed and very fine steps keep
    the single batch they are given."""
    dyn = task(files)
    lengths = dyn.features.seq_len
    needed = {-(-int(n) // 32) * 32 for n in lengths}
    batches = dyn.warmup_batches([0, 0, 0])
    widths = [dyn.batch_inputs(b)["input_ids"].shape for b in batches]
    assert all(len(b) == 3 and len(set(b)) == 1 for b in batches)
    assert [w for _, w in widths] == sorted(needed, reverse=True) and len(needed) > 1
    assert task(files, "fixed").warmup_batches([0, 0]) == [[0, 0]]
    exact = BertSquadTask("bert-99", *files, sequence_length="dynamic", sequence_step=1)
    distinct = len(set(lengths.tolist()))
    assert len(exact.warmup_batches([0])) == (1 if distinct > 24 else distinct)


def test_two_outputs_fixed_is_raw(files: tuple[Path, Path, Path]) -> None:
    t = task(files, "fixed")
    rng = np.random.default_rng(0)
    start, end = rng.standard_normal((2, 3, 384)).astype(np.float32)
    payloads = t.encode_responses([0, 1, 2], {"output_start_logits": start,
                                              "output_end_logits": end})
    assert [len(p) for p in payloads] == [3072] * 3
    got = np.frombuffer(payloads[1], np.float32).reshape(384, 2)
    assert (got[:, 0] == start[1]).all() and (got[:, 1] == end[1]).all()
    # names decide the order when they say start/end
    swapped = t.encode_responses([0, 1, 2], {"end_logits": end, "start_logits": start})
    assert swapped == payloads


def test_dynamic_pads_with_reference_value(files: tuple[Path, Path, Path]) -> None:
    t = task(files)
    rows = [0, 1]
    width = int(t.features.seq_len[rows].max())
    logits = np.ones((2, width, 2), np.float32)
    payloads = t.encode_responses(rows, {"logits": logits})  # single [N, L, 2] output
    for row, payload in zip(rows, payloads):
        got = np.frombuffer(payload, np.float32).reshape(384, 2)
        n = t.features.seq_len[row]
        assert (got[:n] == 1).all() and (got[n:] == -10000.0).all()


def test_bad_outputs(files: tuple[Path, Path, Path]) -> None:
    t = task(files)
    with pytest.raises(ModelError, match=r"\[N, L, 2\]"):
        t.encode_responses([0], {"x": np.zeros((1, 384), np.float32)})
    with pytest.raises(ModelError, match="3 outputs"):
        t.encode_responses([0], {k: np.zeros((1, 384), np.float32) for k in "abc"})
    with pytest.raises(ConfigError, match="sequence_length"):
        task(files, "packed")


def test_make_fixed_model_dynamic(tmp_path: Path) -> None:
    from mlharness.backends.onnx_dynamic import main as make_dynamic_main
    from mlharness.backends.onnx_shapes import onnx_input_shapes
    from synthetic_squad import make_bert_onnx

    fixed = make_bert_onnx(tmp_path / "fixed.onnx", 3000, fixed_seq=384)
    assert onnx_input_shapes(fixed) == {n: [None, 384] for n in
                                        ("input_ids", "input_mask", "segment_ids")}
    assert make_dynamic_main([str(fixed), str(tmp_path / "dyn.onnx")]) == 0
    assert onnx_input_shapes(tmp_path / "dyn.onnx")["input_ids"] == [None, None]
