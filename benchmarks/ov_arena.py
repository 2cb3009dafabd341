"""What one malloc arena costs OpenVINO (issue 38's workaround), side by side in one run.

Each round starts two fresh processes in turn, one with ``one_malloc_arena()`` called first (as
a run's worker does) and one without: both load the same BERT-shaped ONNX model (random weights,
dynamic sequence length) into ``OpenVinoBackend`` with the THROUGHPUT hint (two streams here),
warm up one batch per width, then time ``--batches`` batches of 4 over the widths 64..384 (each
batch split over the streams, as Offline runs it). Prints the samples/s of each round and

  RATIO one-arena/default samples/s = X.XX   (median of the rounds' ratios)

    python benchmarks/ov_arena.py                      # 4 layers, hidden 768: about 3 minutes
    python benchmarks/ov_arena.py --layers 24 --hidden 1024 --heads 16 --intermediate 4096
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

WIDTHS = list(range(64, 385, 32))

#: one measurement in a fresh interpreter: argv = model, arena (one|default), batches
MEASURE = """
import json, sys, time
import numpy as np
from mlharness.backends.openvino import OpenVinoBackend, one_malloc_arena
from mlharness.backends.base import BackendOptions
model, arena, batches = sys.argv[1], sys.argv[2], int(sys.argv[3])
if arena == "one":
    assert one_malloc_arena()
backend = OpenVinoBackend()
backend.load(__import__("pathlib").Path(model), BackendOptions(scenario="Offline"))
rng = np.random.default_rng(0)
def batch(width):
    return {"input_ids": rng.integers(0, 1000, (4, width), dtype=np.int64),
            "input_mask": np.ones((4, width), np.int64),
            "segment_ids": np.zeros((4, width), np.int64)}
widths = %s
for w in widths:
    backend.predict(batch(w))
t0 = time.perf_counter()
for k in range(batches):
    backend.predict(batch(widths[k %% len(widths)]))
print(json.dumps({"samples_per_s": 4 * batches / (time.perf_counter() - t0)}))
""" % WIDTHS


def measure(model: Path, arena: str, batches: int) -> float:
    out = subprocess.run([sys.executable, "-c", MEASURE, str(model), arena, str(batches)],
                         capture_output=True, text=True, check=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["samples_per_s"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--intermediate", type=int, default=3072)
    p.add_argument("--batches", type=int, default=44, help="timed batches per process")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    from synthetic_squad import make_bert_onnx

    with tempfile.TemporaryDirectory() as tmp:
        model = make_bert_onnx(Path(tmp) / "bert.onnx", 30522, layers=args.layers,
                               hidden=args.hidden, heads=args.heads,
                               intermediate=args.intermediate, seed=1)
        ratios = []
        for k in range(args.rounds):
            first, second = ("one", "default") if k % 2 == 0 else ("default", "one")
            rate = {first: measure(model, first, args.batches)}
            rate[second] = measure(model, second, args.batches)
            ratios.append(rate["one"] / rate["default"])
            print(f"round {k + 1}: one arena {rate['one']:.2f} samples/s, default "
                  f"{rate['default']:.2f} samples/s", flush=True)
    print(f"RATIO one-arena/default samples/s = {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
