"""BERT on CPU: the official reference harness vs mlharness per runtime and precision.

Side by side in one run, Offline, the same first N features of the same synthetic SQuAD v1.1 set
on each side, on a BERT-large-shaped ONNX model with random weights (24 layers, hidden 1024, 16
heads, intermediate 4096, vocab 30522; ``tests/synthetic_squad.make_bert_onnx``). The set's
lengths (``--lengths``): ``squad`` (default) as real SQuAD v1.1 dev's, about 46 % of 384 real
tokens, or ``long``, the set of the tables before 2026-11-27 (80 % in ``--quick``'s features):

  reference   ``language/bert/run.py --backend onnxruntime`` from the official checkout
              (``../shared/official``): batch 1, every feature padded to 384, fp32. It needs
              transformers (its tokenizer) and absl: it runs in its own venv (``--reference-python``,
              or one made under --workdir with pip the first time).
  mlharness   onnxruntime / openvino / pytorch x fp32 / bf16 / int8, batches cut to their longest
              sequence rounded up to 32 (length-sorted Offline; the warm-up runs a batch of
              each width); bf16 only where the CPU has it (AMX or AVX512_BF16; on pytorch
              eager and with torch.compile), int8 = onnxruntime's and pytorch's dynamic int8,
              the calibrated QDQ model (``mlharness calibrate``, official SQuAD feature list)
              and the NNCF IR (``mlharness calibrate --backend openvino``, also with its
              unquantised rest in bf16) on OpenVINO; pytorch runs the same weights as the
              official checkpoint format (model.pytorch + bert_config.json); without --quick
              also compiled ahead of time into packages (``package=true``: fp32 and the PT2E
              int8 program); a package row whose run built the package is measured again from
              it, as later runs load it.

Then reduced precision on a small TRAINED BERT with decisive outputs (``tests/trained_bert``: 2
layers trained for a minute or two on synthetic who/year/place SQuAD questions, exported with the
official ONNX signature and as the official PyTorch checkpoint): EM/F1 of fp32, bf16 and int8 per
runtime, judged by the bert-99 (>= 99% of fp32 F1) and bert-99.9 (>= 99.9%) rules.

Ends with the fraction of the CPU's peak reached and the machine-readable lines:

  RATIO best/reference Offline samples/s = X.XX (best: RUNTIME PRECISION ...)
  F1 RATIO bf16/fp32 = 0.XXXX       (the lowest over runtimes)
  F1 RATIO int8/fp32 = 0.XXXX       (the lowest over runtimes and int8 recipes)

    nice -n 10 python benchmarks/bert_cpu.py --quick          # < 20 min on 2 shared cores
    python benchmarks/bert_cpu.py --samples 96
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from mlharness.loadgen.mllog import parse_run_logs  # noqa: E402
from mlharness.loadgen.settings import render_user_conf  # noqa: E402
from mlharness.spec import RunSpec  # noqa: E402
from cpu_peak import describe, peak_flops  # noqa: E402
from runtimes import (MODEL_NOTES, calibrated, installed, run_or_reason,  # noqa: E402
                      no_bf16_note, not_run, official_dir, print_machine, report_failed)

REFERENCE_PACKAGES = ["transformers<5", "absl-py", "six", "numpy", "onnxruntime",
                      "mlcommons-loadgen==6.0.17"]


class Lengths(NamedTuple):
    """A synthetic SQuAD set: ``make_squad``'s paragraphs x questions per article and the share
    of its words the vocab holds whole (the rest split into pieces, as rare words are)."""

    paragraphs: int
    questions: int
    whole_word_share: float
    about: str


#: Contexts of 50-170 words in both (real SQuAD contexts average ~120 words).
LENGTHS = {
    # Real SQuAD v1.1 dev at 384: padding is 54 % of the tokens (Zeng et al., "Boosting
    # distributed training performance of the unpadded BERT model",
    # https://openreview.net/forum?id=3nzKUh9a4M), so ~177 real. One question per context, so
    # that --quick's 24 features are 24 contexts; 95 % whole words: ~1.2 pieces per word
    # (the contexts here: 120 words on average).
    "squad": Lengths(12, 1, 0.95, "as real SQuAD v1.1 dev's, about 177 real tokens of 384"),
    # The set until 2026-11-27: a fifth of the words in pieces doubles the tokens per word
    "long": Lengths(3, 4, 0.8, "the earlier tables' longer set"),
}


def build_inputs(workdir: Path, args: argparse.Namespace) -> dict[str, Path]:
    """The model (built once in ``workdir``) and, under ``workdir/lengths-NAME``, the data set,
    links to the model and the int8 models calibrated on that set."""
    import synthetic_squad as synth

    data = workdir / f"lengths-{args.lengths}"
    data.mkdir(parents=True, exist_ok=True)
    out = {"data": data, "squad": data / "dev-v1.1.json", "vocab": data / "vocab.txt"}
    if not out["squad"].is_file():
        lengths = LENGTHS[args.lengths]
        synth.make_squad(out["squad"], articles=args.articles, paragraphs=lengths.paragraphs,
                         questions=lengths.questions, seed=7, long_every=10_000,
                         short_words=(50, 170))
        synth.make_vocab(out["vocab"], out["squad"], whole_word_share=lengths.whole_word_share)
    shape = (args.layers, args.hidden, args.heads, args.intermediate)
    name = "bert-l{}-h{}-a{}-i{}".format(*shape)
    model = workdir / f"{name}.onnx"
    if not model.is_file():
        t0 = time.time()
        print(f"building {name}.onnx (random weights) ...", flush=True)
        synth.make_bert_onnx(model, vocab_size=30522, layers=args.layers,
                             hidden=args.hidden, heads=args.heads,
                             intermediate=args.intermediate, seed=1)
        print(f"  {model.stat().st_size / 1e6:.0f} MB in {time.time() - t0:.0f} s", flush=True)
    # linked into the set's folder, so that the int8 models calibrated on it are built there
    out["onnx"] = _linked(model, data)
    if installed("torch"):
        checkpoint = workdir / f"{name}-pytorch" / "model.pytorch"
        if not checkpoint.is_file():
            synth.bert_checkpoint(model, checkpoint.parent, *shape, 30522)
        out["pytorch"] = _linked(checkpoint, data / checkpoint.parent.name)
        _linked(checkpoint.with_name("bert_config.json"), data / checkpoint.parent.name)
    print("calibrated int8 (official SQuAD feature list) ...", flush=True)
    out.update(calibrated("bert-99", out["onnx"], out["squad"], data / "cache", out["vocab"],
                          checkpoint=out.get("pytorch")))
    return out


def _linked(path: Path, folder: Path) -> Path:
    """A symbolic link to ``path`` in ``folder`` (made once)."""
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / path.name
    if not link.is_symlink():
        link.symlink_to(path.resolve())
    return link


def spec_for(files: dict[str, Path], n: int, workdir: Path, **kw: Any) -> RunSpec:
    return RunSpec(benchmark="bert-99", scenario="Offline", mode="performance",
                   dataset=files["squad"], vocab=files["vocab"], cache_dir=workdir / "cache",
                   max_samples=n, target_qps=0.001, min_duration=0, min_query_count=n,
                   performance_sample_count=n, output_dir=workdir / "runs",
                   stall_timeout=1800.0, **kw)


def reference_python(workdir: Path, given: str | None) -> str:
    if given:
        return given
    venv = workdir / "reference-venv"
    py = venv / "bin" / "python"
    if not py.is_file():
        print(f"making the reference's venv in {venv} (pip: {' '.join(REFERENCE_PACKAGES)}) ...",
              flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *REFERENCE_PACKAGES], check=True)
    return str(py)


def reference(files: dict[str, Path], n: int, workdir: Path, python: str) -> float:
    """``run.py --backend onnxruntime`` on the first n features, LoadGen settings as ours."""
    bert_dir = official_dir() / "language" / "bert"
    out = workdir / "reference" / time.strftime("%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    spec = spec_for(files, n, workdir, model=files["onnx"])
    (out / "user.conf").write_text(render_user_conf(spec.test_config("bert")))
    env = {**os.environ, "ML_MODEL_FILE_WITH_PATH": str(files["onnx"]),
           "DATASET_FILE": str(files["squad"]), "VOCAB_FILE": str(files["vocab"]),
           "LOG_PATH": str(out), "USE_GPU": "no",
           # the BERT tokenization module (a submodule upstream) sits beside the checkout
           "PYTHONPATH": os.pathsep.join([str(bert_dir),
                                          str(official_dir().parent / "bert-tokenization")])}
    cmd = [python, str(bert_dir / "run.py"), "--backend", "onnxruntime", "--scenario", "Offline",
           "--user_conf", str(out / "user.conf"), "--max_examples", str(n)]
    # cwd: its feature cache (eval_features.pickle) goes there, never into the official checkout
    done = subprocess.run(cmd, cwd=workdir / "reference", env=env, capture_output=True,
                          text=True)
    if done.returncode != 0 or not (out / "mlperf_log_detail.txt").is_file():
        raise SystemExit(f"reference harness failed:\n{done.stderr[-3000:]}")
    return parse_run_logs(out).value


#: pytorch's AOTInductor package, built once into the cache (docs/performance.md)
PACKAGE = (("package", "true"),)
#: torch.compile at load (inductor with freezing; a row for bf16 only, as a compile takes a minute)
COMPILE = (("compile", "true"),)


class Config(NamedTuple):
    """One row: a runtime, a precision, the model file (its key in ``files``) and backend
    options."""

    runtime: str
    precision: str
    key: str
    options: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        if (self.runtime, self.precision, self.key) in (("onnxruntime", "int8", "onnx"),
                                                        ("pytorch", "int8", "pytorch")):
            return f"{self.runtime} int8 (dynamic)"
        rest = " + bf16 rest" if ("unquantised", "bf16") in self.options else ""
        note = MODEL_NOTES[self.key]
        if PACKAGE[0] in self.options:
            note = " (calibrated PT2E, package)" if self.key == "pt2e" else " (package)"
        elif COMPILE[0] in self.options:
            note = MODEL_NOTES["pth-compiled"]
        return f"{self.runtime} {self.precision}{note}{rest}"


def configs(bf16: dict[str, bool], files: dict[str, Path],
            packages: bool = False) -> list[Config]:
    """The rows; onnxruntime int8 on the fp32 model is its dynamic quantisation, and the NNCF IR
    also runs with what it leaves unquantised in bf16 where the CPU has bf16; ``packages``: the
    pytorch rows again from AOTInductor packages (their builds take minutes: not --quick)."""
    out = [Config("onnxruntime", "fp32", "onnx"), Config("onnxruntime", "int8", "onnx")]
    if installed("openvino"):
        out.append(Config("openvino", "fp32", "onnx"))
        if bf16["openvino"]:
            out.append(Config("openvino", "bf16", "onnx"))
        out += [Config("openvino", "int8", key) for key in ("int8", "nncf") if key in files]
        if bf16["openvino"] and "nncf" in files:
            out.append(Config("openvino", "int8", "nncf", (("unquantised", "bf16"),)))
    if "pytorch" in files:
        out.append(Config("pytorch", "fp32", "pytorch"))
        if bf16["pytorch"]:
            out += [Config("pytorch", "bf16", "pytorch"), Config("pytorch", "bf16", "pytorch",
                                                                  COMPILE)]
        out.append(Config("pytorch", "int8", "pytorch"))
        out += [Config("pytorch", "int8", "pt2e")] if "pt2e" in files else []
        if packages:  # the same models compiled ahead of time into a package (package=true)
            out.append(Config("pytorch", "fp32", "pytorch", PACKAGE))
            out += [Config("pytorch", "bf16", "pytorch", PACKAGE)] if bf16["pytorch"] else []
            out += [Config("pytorch", "int8", "pt2e", PACKAGE)] if "pt2e" in files else []
    return out


def harness(files: dict[str, Path], config: Config, n: int, workdir: Path,
            batch: int) -> dict[str, Any]:
    """One row's run; a row that fails keeps its reason (``failed``) and the benchmark goes on."""
    spec = spec_for(files, n, workdir, model=files[config.key], backend=config.runtime,
                    precision=config.precision, batch_size=batch,
                    backend_option=dict(config.options),
                    task_option={"sequence_length": "dynamic"})
    row: dict[str, Any] = {"runtime": config.runtime, "precision": config.precision,
                           "batch": batch, "label": config.label}
    record, failure = run_or_reason(spec)
    package = (record.data.get("backend") or {}).get("compiled_package") or {} if record else {}
    if package.get("from_cache") is False:  # this run built it: the next ones load it
        print(f"  ({config.label}: package built in {package['built_s']:.0f} s; measured again "
              "from it, as later runs load it)", flush=True)
        record, failure = run_or_reason(spec)
    if record is None or record.result is None:
        return {**row, "failed": failure or "no result"}
    return {**row, "samples_per_s": record.result.value,
            "warmup_s": (record.data.get("sut") or {}).get("warmup_s"),
            "run_dir": str(record.run_dir)}


def accuracy_table(workdir: Path, bf16: dict[str, bool]) -> list[dict[str, Any]]:
    """EM/F1 of the trained fixture (its whole dev set, accuracy mode) per runtime x precision."""
    from trained_bert import make_trained_bert

    fixture = make_trained_bert(workdir / "trained")
    files = {"onnx": fixture.onnx, "squad": fixture.squad, "vocab": fixture.vocab,
             "pytorch": fixture.checkpoint}
    if not installed("torch"):
        files.pop("pytorch")
    files.update(calibrated("bert-99", fixture.onnx, fixture.squad, workdir / "cache",
                            fixture.vocab, checkpoint=files.get("pytorch")))
    rows = []
    for config in configs(bf16, files):
        rows.append(f1_row(files, config, workdir))
        if config == Config("onnxruntime", "int8", "onnx"):  # and the calibrated QDQ model
            rows.append(f1_row(files, config._replace(key="int8"), workdir))
    return rows


def f1_row(files: dict[str, Path], config: Config, workdir: Path) -> dict[str, Any]:
    spec = RunSpec(benchmark="bert-99", scenario="Offline", mode="accuracy",
                   backend=config.runtime, model=files[config.key], dataset=files["squad"],
                   vocab=files["vocab"], cache_dir=workdir / "cache", precision=config.precision,
                   backend_option=dict(config.options), output_dir=workdir / "runs-accuracy",
                   task_option={"sequence_length": "dynamic"})
    row = {"runtime": config.runtime, "precision": config.precision, "label": config.label}
    record, failure = run_or_reason(spec)
    if record is None or record.accuracy is None:
        report_failed(config.label, failure or "no accuracy")
        return {**row, "failed": failure or "no accuracy"}
    scores = record.accuracy.details
    print(f"  {config.label:<44} EM {scores.get('exact_match', 0):6.2f}  "
          f"F1 {record.accuracy.value:6.2f}", flush=True)
    return {**row, "f1": record.accuracy.value, "exact_match": scores.get("exact_match")}


def f1_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The table against each runtime's fp32, and the F1 RATIO lines (lowest over the rows
    that ran beside their runtime's fp32; the rows that did not run are named)."""
    fp32 = {r["runtime"]: r["f1"] for r in rows if r["precision"] == "fp32" and "f1" in r}
    lines = [f"{'configuration':<54} {'EM':>7} {'F1':>7} {'F1/fp32':>8}  bert-99  bert-99.9"]
    ratios: dict[str, list[float]] = {"bf16": [], "int8": []}
    for r in rows:
        name = f"mlharness {r['label']}"
        if "f1" not in r:
            lines.append(f"{name:<54} FAILED: {r['failed']}")
        elif r["runtime"] not in fp32:
            lines.append(f"{name:<54} {r['exact_match'] or 0:7.2f} {r['f1']:7.2f}  (its fp32 "
                         "row failed)")
        else:
            ratio = r["f1"] / fp32[r["runtime"]]
            ratios.setdefault(r["precision"], []).append(ratio)
            verdict = ["PASS" if ratio >= bound else "FAIL" for bound in (0.99, 0.999)]
            lines.append(f"{name:<54} {r['exact_match'] or 0:7.2f} {r['f1']:7.2f} "
                         f"{ratio:8.4f}  {verdict[0]:<7}  {verdict[1]}")
    for p in ("bf16", "int8"):
        mine = [r for r in rows if r["precision"] == p]
        runtimes = {r["runtime"] for r in mine}
        failed = [r for r in mine if "f1" not in r] + [
            r for r in rows if r["precision"] == "fp32" and "f1" not in r
            and r["runtime"] in runtimes]
        if ratios[p]:
            lines.append(f"F1 RATIO {p}/fp32 = {min(ratios[p]):.4f}{not_run(failed)}")
        elif mine:
            lines.append(f"F1 RATIO {p}/fp32: none{not_run(failed)}")
    if not any(r["precision"] == "bf16" for r in rows):
        lines.append(no_bf16_note("F1 RATIO bf16/fp32"))
    return lines


def bert_flops(layers: int, hidden: int, inter: int, length: float) -> float:
    """Multiply-adds x 2 of one feature of ``length`` tokens (dense layers + attention)."""
    dense = 2 * length * (4 * hidden * hidden + 2 * hidden * inter)
    attention = 2 * 2 * length * length * hidden
    return layers * (dense + attention)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer samples (< 20 min here)")
    p.add_argument("--samples", type=int, help="first N features (default 64, --quick 24)")
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--intermediate", type=int, default=4096)
    p.add_argument("--articles", type=int, default=12, help="synthetic articles (12 questions each)")
    p.add_argument("--lengths", choices=sorted(LENGTHS), default="squad",
                   help="the synthetic set's lengths: " + "; ".join(
                       f"{k}: {v.about}" for k, v in LENGTHS.items()) + " (default squad)")
    p.add_argument("--batch-size", type=int, default=4,
                   help="largest batch (default 4: with two streams a batch is two features each)")
    p.add_argument("--reference-python", help="python with transformers<5 and absl for run.py")
    p.add_argument("--no-reference", dest="reference", action="store_false")
    p.add_argument("--workdir", type=Path, default=Path("build/bert_cpu"))
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    args.workdir = args.workdir.resolve()  # the reference harness runs in its own folder
    n = args.samples or (24 if args.quick else 64)
    isa, bf16 = print_machine()
    print(describe(isa), flush=True)  # measured now, before anything else runs
    files = build_inputs(args.workdir, args)
    data = files["data"]  # the set's folder: its feature caches and runs
    from mlharness.tasks.question_answering.task import BertSquadTask

    task = BertSquadTask("bert-99", files["squad"], files["vocab"], cache_dir=data / "cache",
                         max_samples=n)
    task.prepare()
    lengths = task.features.seq_len
    mean_length = float(lengths.mean())
    print(f"{n} features, real length mean {mean_length:.0f} of 384 (padding to 384: "
          f"{1 - mean_length / 384:.0%} of the tokens; --lengths {args.lengths}: "
          f"{LENGTHS[args.lengths].about})", flush=True)

    ref = None
    if args.reference:
        python = reference_python(args.workdir, args.reference_python)
        print("reference harness (language/bert/run.py --backend onnxruntime) ...", flush=True)
        ref = reference(files, n, data, python)
        print(f"  {ref:.3f} samples/s", flush=True)
    rows = []
    for config in configs(bf16, files, packages=not args.quick):
        r = harness(files, config, n, data, args.batch_size)
        if r.get("failed"):
            report_failed(f"mlharness {r['label']}", r["failed"])
        else:
            print(f"  mlharness {r['label']:<44} {r['samples_per_s']:8.3f} samples/s "
                  f"(warm-up {r['warmup_s'] or 0:.1f} s)", flush=True)
        rows.append(r)
    print("EM/F1 of a small trained BERT (fp32 vs reduced precision) ...", flush=True)
    accuracy = accuracy_table(args.workdir, bf16)

    work = float(sum(bert_flops(args.layers, args.hidden, args.intermediate, int(x))
                     for x in lengths)) / n
    print(f"\n{'configuration':<54} {'samples/s':>10} {'vs reference':>13} {'of peak':>8}")
    if ref:
        peak = peak_flops(isa, "fp32")
        ref_work = bert_flops(args.layers, args.hidden, args.intermediate, 384)
        frac = f"{ref * ref_work / peak:7.1%}"
        print(f"{'reference run.py (ort fp32, 384)':<54} {ref:10.3f} {1.0:12.2f}x {frac:>8}")
    for r in rows:
        if r.get("failed"):
            print(f"{'mlharness ' + r['label']:<54} {'FAILED':>10}  {r['failed']}")
            continue
        peak = peak_flops(isa, r["precision"])
        frac = f"{r['samples_per_s'] * work / peak:7.1%}"
        ratio = f"{r['samples_per_s'] / ref:12.2f}x" if ref else f"{'-':>13}"
        print(f"{'mlharness ' + r['label']:<54} {r['samples_per_s']:10.3f} {ratio} {frac:>8}")
    ran = [r for r in rows if not r.get("failed")]
    print(f"\n{describe(isa)}; the machine may be shared with other jobs, so absolute numbers "
          "are noisy; ratios come from one run")
    if ref and ran:
        best = max(ran, key=lambda r: r["samples_per_s"])
        print(f"RATIO best/reference Offline samples/s = {best['samples_per_s'] / ref:.2f} "
              f"(best: {best['label']} batch {best['batch']} dynamic length; "
              f"--lengths {args.lengths}, mean {mean_length:.0f} of 384{not_run(rows)})")
    elif ref:
        print(f"RATIO best/reference Offline samples/s: none{not_run(rows)}")
    print()
    print("\n".join(f1_lines(accuracy)))
    if args.json:
        args.json.write_text(json.dumps({"reference": ref, "harness": rows, "isa": isa,
                                         "accuracy": accuracy,
                                         "samples": n, "mean_length": mean_length,
                                         "lengths": args.lengths},
                                        indent=2, default=str))


if __name__ == "__main__":
    main()
