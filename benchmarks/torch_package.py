"""PyTorch backend: ``compile=true`` (torch.compile at every load) against ``package=true`` (an
AOTInductor package built once, kept in the cache), side by side in one run, on a BERT-shaped
checkpoint with random weights (the official PyTorch format: model.pytorch + bert_config.json).

Each row is a process of its own that loads the model as a run does (``PyTorchBackend``) and
times ``--batches`` batches of ``--batch`` x 384 tokens after one warm-up:

  compile            torch.compile with freezing (the weights packed by oneDNN at load)
  package build      the first load: export and AOTInductor build (in a process of their
                     own), then load
  package            a later load, from the cache (what runs and tune probes do)
  package, torch's   the same package through torch's own loader (``load_package``), whose
  loader             weights sit 16 bytes off a 64-byte line (``torch_package_runner``)

Memory: anonymous resident memory after the batches, the row's peak (``VmHWM``) and, for the
build, the build process's peak. Ends with the machine-readable lines:

  RATIO package/compile per batch = X.XX
  RATIO torch-loader/package per batch = X.XX

    nice -n 10 python benchmarks/torch_package.py                  # 4 layers, hidden 768: ~4 min
    python benchmarks/torch_package.py --large --batch 2           # BERT-large: ~10 min
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SEQUENCE = 384


def make_checkpoint(folder: Path, layers: int, hidden: int) -> Path:
    """A random-weight BERT for question answering in the official PyTorch format."""
    import torch

    from mlharness.backends.torch_models import BertForQA

    model = folder / "model.pytorch"
    if model.is_file():
        return model
    config = {"hidden_size": hidden, "num_hidden_layers": layers,
              "num_attention_heads": hidden // 64, "intermediate_size": 4 * hidden,
              "vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2,
              "hidden_act": "gelu"}
    torch.manual_seed(0)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(BertForQA(config).state_dict(), model)
    (folder / "bert_config.json").write_text(json.dumps(config))
    return model


def measure(model: Path, cache: Path, mode: str, batch: int, batches: int, threads: int) -> dict:
    """One row, measured in this process (``--row``)."""
    import numpy as np

    from mlharness.backends.base import BackendOptions
    from mlharness.backends.pytorch import PyTorchBackend
    from mlharness.backends.torch_archs import BERT_INPUTS

    extra = {"compile": True} if mode == "compile" else {"package": True}
    started = time.perf_counter()
    backend = PyTorchBackend()
    backend.load(model, BackendOptions(threads=threads, cache_dir=cache, extra=extra,
                                       scenario="Offline", run_spec={"batch_size": batch}))
    load_s = time.perf_counter() - started
    if mode == "torch-loader":
        from torch._inductor.package import load_package

        backend.forward = load_package(backend.describe()["compiled_package"]["path"])
    rng = np.random.default_rng(0)
    ids, mask, segments = BERT_INPUTS
    inputs = {ids: rng.integers(1000, 30000, (batch, SEQUENCE)),
              mask: np.ones((batch, SEQUENCE), np.int64),
              segments: np.zeros((batch, SEQUENCE), np.int64)}
    backend.predict(inputs)  # warm-up
    times = []
    for _ in range(batches):
        t = time.perf_counter()
        backend.predict(inputs)
        times.append(time.perf_counter() - t)
    return {"load_s": load_s, "batch_s": times, "memory_mb": status_mb("RssAnon"),
            "peak_mb": status_mb("VmHWM"),
            "build_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e3,
            "package": backend.describe()["compiled_package"]}


def status_mb(field: str) -> float:
    """A line of this process's ``/proc/self/status``, MB: ``RssAnon`` (anonymous resident
    memory: weights, activations), ``VmHWM`` (the most it was resident at once)."""
    with open("/proc/self/status") as status:
        kb = next(int(line.split()[1]) for line in status if line.startswith(field + ":"))
    return kb / 1e3


def row(args: argparse.Namespace, model: Path, cache: Path, mode: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--row", mode, "--model", str(model),
                          "--cache", str(cache), "--batch", str(args.batch),
                          "--batches", str(args.batches), "--threads", str(args.threads)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"{mode} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--large", action="store_true", help="BERT-large: 24 layers, hidden 1024")
    parser.add_argument("--batch", type=int, default=8, help="samples a batch (x 384 tokens)")
    parser.add_argument("--batches", type=int, default=4, help="timed batches a row")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
    parser.add_argument("--workdir", type=Path, help="keeps the checkpoint (default: temporary)")
    parser.add_argument("--row", help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cache", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        print(json.dumps(measure(args.model, args.cache, args.row, args.batch, args.batches,
                                 args.threads)))
        return
    if args.large:
        args.layers, args.hidden = 24, 1024
    from mlharness.hostinfo import cpu_info, matrix_isa

    isa = matrix_isa()
    print(f"machine: {cpu_info()['model']}; matrix paths: bf16={isa['bf16'] or 'none'}, "
          f"int8={isa['int8'] or 'none'}")
    print(f"model: BERT {args.layers} layers, hidden {args.hidden}, fp32, random weights; "
          f"batches of {args.batch} x {SEQUENCE}", flush=True)
    with tempfile.TemporaryDirectory(prefix="torch-package-bench-") as tmp:
        work = args.workdir or Path(tmp)
        model = make_checkpoint(work / f"bert-{args.layers}x{args.hidden}", args.layers,
                                args.hidden)
        cache = Path(tmp) / "cache"  # every run builds its package afresh
        rows = {}
        torchs = "package, torch's loader"
        for mode, label in (("compile", "compile"), ("package", "package build"),
                            ("package", "package"), ("torch-loader", torchs)):
            rows[label] = result = row(args, model, cache, mode)
            per = result["batch_s"]
            print(f"  {label:<26} load {result['load_s']:7.1f} s   per batch "
                  f"{statistics.median(per):6.2f} s (min {min(per):.2f}, max {max(per):.2f})   "
                  f"memory {result['memory_mb']:,.0f} MB (peak {result['peak_mb']:,.0f}"
                  + (f", build process {result['build_peak_mb']:,.0f}"
                     if label == "package build" else "") + " MB)", flush=True)
    median = {label: statistics.median(r["batch_s"]) for label, r in rows.items()}
    print(f"RATIO package/compile per batch = {median['package'] / median['compile']:.2f}")
    print(f"RATIO torch-loader/package per batch = {median[torchs] / median['package']:.2f}")


if __name__ == "__main__":
    main()
