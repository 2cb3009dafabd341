"""Whisper on CPU: a plain transformers ``generate`` loop vs mlharness Offline per precision.

Side by side in one run, on the same model and the same clips:

  plain       what a user writes first: ``WhisperForConditionalGeneration.generate`` on one clip
              at a time (its feature extractor, the reference's decoder prompt, greedy, at most
              200 new tokens), fp32, after one untimed clip.
  mlharness   ``run -b whisper --backend hf`` Offline, one LoadGen query of every clip (the
              real harness and LoadGen, warm-up included), per precision: fp32, bf16 (where the
              CPU has bf16 units: AMX or AVX512_BF16; refused elsewhere), int8 (dynamic) and
              int8-calibrated (``mlharness calibrate -b whisper --backend hf`` on the first
              ``--calibration-clips`` clips, then ``--precision int8`` on the folder it writes:
              static activation scales); the hf backend's batched greedy pass
              (``--batch-size``, default 16).

The model is whisper-tiny's shape (d_model 384, 4 + 4 layers, 6 heads) with large-v3's vocabulary
and 128 mel bins, random weights (nothing is downloaded); the clips are the tests' LibriSpeech
utterances spoken by espeak-ng, repacked as the reference repacks them, repeated to ``--clips``.
With random weights every clip runs to the 200-token limit and transcripts are noise.

Then the word error rate: the scorer on a fixed hand-checked log (3 errors in 14 words, counted
by hand), and each precision's transcripts (an accuracy run each) against fp32's, and against
the clips' references.

Ends with the machine-readable line (fp32 against fp32; the best precision in parentheses):

  RATIO mlharness/plain Offline tokens/s = X.XX

    nice -n 10 python benchmarks/whisper_cpu.py                 # ~10 min on 2 idle cores
    python benchmarks/whisper_cpu.py --clips 64 --batch-size 32 --threads 8
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from mlharness.hostinfo import matrix_isa  # noqa: E402
from mlharness.loadgen.mllog import read_accuracy_log  # noqa: E402
from mlharness.spec import RunSpec  # noqa: E402
from mlharness.speech import labels, repack, wer  # noqa: E402
from mlharness.speech.manifest import MANIFEST_NAME  # noqa: E402

PROMPT = [50258, 50259, 50360, 50364]  # <|startoftranscript|><|en|><|transcribe|><|notimestamps|>
MAX_NEW_TOKENS = 200
#: whisper_cpu's hand-checked log: 1 substitution, a joined word (a match), 2 deletions
HAND_REFS = ["the cat sat on the mat", "every day is a new day", "hello world"]
HAND_HYPS = ["the cat sat on a mat", "everyday is a new day", ""]


def build(work: Path, clips: int) -> dict[str, Path]:
    """The clips (repacked, the manifest repeated to ``clips`` entries) and the model."""
    import whisper_fixtures as wf

    data = work / "data"
    if not (data / MANIFEST_NAME).is_file():
        repack.repack(wf.librispeech(work), data)
    entries = json.loads((data / MANIFEST_NAME).read_text())
    manifest = work / f"manifest-{clips}.json"
    manifest.write_text(json.dumps([entries[k % len(entries)] for k in range(clips)]))
    model = work / "whisper-tiny-shape"
    if not (model / "config.json").is_file():
        wf.tiny_whisper(model, d_model=384, layers=4, heads=6)
    return {"data": data, "manifest": manifest, "model": model}


def plain(paths: dict[str, Path], clips: int, threads: int) -> dict[str, Any]:
    """One clip at a time through ``generate``; tokens/s and samples/s over the timed clips."""
    import torch
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

    from mlharness.speech import audio
    from mlharness.speech.manifest import read_manifest

    torch.set_num_threads(threads)
    net = WhisperForConditionalGeneration.from_pretrained(paths["model"]).eval()
    features = WhisperFeatureExtractor.from_pretrained(paths["model"])
    files = [c.audio for c in read_manifest(paths["manifest"], paths["data"]).clips][:clips]
    prompt = torch.tensor([PROMPT])

    def one(path: Path) -> int:
        wave = audio.load(path)
        feats = features([wave], sampling_rate=audio.SAMPLE_RATE,
                         return_tensors="pt").input_features
        with torch.inference_mode():
            out = net.generate(feats, decoder_input_ids=prompt, max_new_tokens=MAX_NEW_TOKENS,
                               do_sample=False)
        ids = out[0].tolist()
        while ids and ids[0] in PROMPT:  # generate returns the prompt's last token(s) first
            ids.pop(0)
        return len(ids)

    one(files[0])  # warm-up, untimed
    start = time.perf_counter()
    tokens = sum(one(path) for path in files)
    seconds = time.perf_counter() - start
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
            "samples_per_s": len(files) / seconds}


def harness(paths: dict[str, Path], out: Path, precision: str, mode: str, batch: int,
            threads: int, clips: int, model: Path | None = None) -> Any:
    """One mlharness run (Offline; performance: one query of every clip)."""
    from mlharness.runner import execute

    spec = RunSpec(benchmark="whisper", scenario="Offline", mode=mode, backend="hf",
                   model=model or paths["model"], dataset=paths["data"], output_dir=out,
                   precision=precision, batch_size=batch, threads=threads,
                   task_option={"manifest": str(paths["manifest"])},
                   stall_timeout=600.0,
                   **({"target_qps": 1.0, "min_duration": 1, "min_query_count": clips,
                       "performance_sample_count": clips} if mode == "performance" else {}))
    record = execute(spec)
    if record.status != "ok":
        raise SystemExit(f"mlharness {precision} {mode} run failed: {record.error_message}")
    return record


def calibrate(paths: dict[str, Path], work: Path, clips: int) -> Path:
    """The calibrated int8 folder of the model, from the first ``clips`` clips (an own list:
    MLCommons publishes none for whisper), made once per work folder."""
    from mlharness.calibration import CalibrationRequest
    from mlharness.calibration import calibrate as run_calibrate
    from mlharness.speech.manifest import read_manifest

    target = work / "whisper-tiny-shape.int8"
    if (target / "mlharness_int8.json").is_file():
        return target
    names = [c.audio.name for c in read_manifest(paths["manifest"], paths["data"]).clips][:clips]
    listed = work / "calibration-clips.txt"
    listed.write_text("".join(f"{n}\n" for n in dict.fromkeys(names)))
    start = time.perf_counter()
    record = run_calibrate(CalibrationRequest(
        benchmark="whisper", model=paths["model"], dataset=paths["data"], backend="hf",
        output=target, calibration_list=str(listed),
        task_option={"manifest": str(paths["manifest"])}))
    print(f"calibrated int8: {record['samples']['used']} clips, {record['quantised_layers']} "
          f"linear layers, in {time.perf_counter() - start:.1f} s ({record['recipe']})")
    return target


def transcripts(run_dir: Path) -> dict[int, str]:
    return {index: labels.decode_response(data)
            for index, data in read_accuracy_log(run_dir / "mlperf_log_accuracy.json")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clips", type=int, default=16, help="clips per side (default 16)")
    parser.add_argument("--batch-size", type=int, default=16, help="mlharness's batch")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--precisions", default="fp32,bf16,int8,int8-calibrated")
    parser.add_argument("--calibration-clips", type=int, default=4,
                        help="clips int8-calibrated is calibrated on (default 4)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep the clips, model and runs here (default: a temporary folder)")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="whisper_cpu."))
    work.mkdir(parents=True, exist_ok=True)
    print(f"machine: {os.cpu_count()} cores, bf16 path: {matrix_isa()['bf16']}, "
          f"int8 path: {matrix_isa()['int8']}, load average {os.getloadavg()[0]:.1f}")
    paths = build(work, args.clips)
    rows: dict[str, dict[str, Any]] = {}
    base = plain(paths, args.clips, args.threads)
    print(f"plain generate, 1 clip at a time, fp32: {base['tokens']} tokens in "
          f"{base['seconds']:.1f} s = {base['tokens_per_s']:.1f} tok/s "
          f"({base['samples_per_s']:.3f} samples/s)")
    texts: dict[str, dict[int, str]] = {}
    for precision in args.precisions.split(","):
        if precision == "bf16" and matrix_isa()["bf16"] is None:
            print("mlharness bf16: not run (no bf16 units on this CPU: AMX or AVX512_BF16)")
            continue
        model = (calibrate(paths, work, args.calibration_clips)
                 if precision == "int8-calibrated" else None)
        runs_as = "int8" if model is not None else precision
        record = harness(paths, work / "runs", runs_as, "performance", args.batch_size,
                         args.threads, args.clips, model)
        result = record.result
        rows[precision] = {"tokens_per_s": result.value, "samples_per_s": result.samples_per_s,
                           "valid": result.valid}
        print(f"mlharness Offline hf {precision}, batch {args.batch_size}: "
              f"{result.value:.1f} tok/s ({result.samples_per_s:.3f} samples/s)"
              + (f", {result.value / rows['fp32']['tokens_per_s']:.2f}x fp32"
                 if "fp32" in rows and precision != "fp32" else ""))
        texts[precision] = transcripts(harness(paths, work / "runs", runs_as, "accuracy",
                                               args.batch_size, args.threads,
                                               args.clips, model).run_dir)
    hand = wer.word_error_rate(HAND_HYPS, HAND_REFS)
    print(f"WER of the hand-checked log: {hand.errors}/{hand.words} words = "
          f"{hand.wer * 100:.3f}% (counted by hand: 3/14 = {3 / 14 * 100:.3f}%)")
    from mlharness.speech.manifest import read_manifest

    refs = [labels.decode(labels.reference_indices(c.transcript))
            for c in read_manifest(paths["manifest"], paths["data"]).clips]
    for precision, said in texts.items():
        order = sorted(said)
        against_refs = wer.word_error_rate([said[i] for i in order], [refs[i] for i in order])
        line = f"WER {precision}: {against_refs.wer * 100:.2f}% against the references"
        if precision != "fp32" and "fp32" in texts:
            against = wer.word_error_rate([said[i] for i in order],
                                          [texts["fp32"][i] for i in order])
            line += f", {against.wer * 100:.2f}% against fp32's transcripts"
        print(line + " (random weights: noise)")
    if "fp32" not in rows:
        return 1
    best = max(rows, key=lambda p: rows[p]["tokens_per_s"])
    print(f"RATIO mlharness/plain Offline tokens/s = "
          f"{rows['fp32']['tokens_per_s'] / base['tokens_per_s']:.2f} "
          f"(best: {best} {rows[best]['tokens_per_s'] / base['tokens_per_s']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
