"""``mlharness calibrate``: build a calibrated int8 model from the official calibration list."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.markup import escape

from mlharness.backends import prepare_process
from mlharness.cli.render import LiveProgress, console
from mlharness.cli.spec_flags import key_value as _key_value
from mlharness.options import parse_scalar

EXAMPLES = """\
examples:
  mlharness calibrate -b resnet50 --model resnet50_v1.onnx --dataset imagenet-val
  mlharness calibrate -b bert-99 --model model.onnx --dataset dev-v1.1.json --vocab vocab.txt \\
      --backend openvino
  mlharness calibrate -b resnet50 --model resnet50.pth --dataset imagenet-val --backend pytorch \\
      --task-option label_offset=0 --task-option preprocessing=torchvision
  mlharness calibrate -b resnet50 ... --calibration-list option_2      # ImageNet's second list
  mlharness calibrate -b demo ... --calibration-list my_samples.txt    # your own (not official)
  mlharness calibrate -b whisper --backend hf --model whisper-large-v3/ --dataset DATA_DIR \\
      --calibration-list my_clips.txt      # no official whisper list: clip file names/indices

Then run the model it writes with --precision int8:
  mlharness run -b resnet50 --model resnet50_v1.int8.onnx --precision int8 ...
  mlharness run -b bert-99 --model model.int8.xml --precision int8 --backend openvino ...
  mlharness run -b resnet50 --model resnet50.int8.pt2 --precision int8 --backend pytorch ...
  mlharness run -b whisper --model whisper-large-v3.int8/ --precision int8 --backend hf ...
run.json then holds the calibration record (<output>.calibration.json, e.g.
resnet50_v1.int8.onnx.calibration.json: one per int8 model, so each run records its own).
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate", help="build a calibrated int8 model from the official calibration list",
        description="Quantise an fp32 model to int8 with activation ranges measured on the "
                    "benchmark's official calibration samples (mlcommons/inference "
                    "calibration/), pre-processed as a run feeds them. --backend onnxruntime "
                    "writes a QDQ ONNX model (per-channel int8 weights, uint8 activations; "
                    "OpenVINO runs it too); --backend openvino writes an OpenVINO IR quantised "
                    "by NNCF (usually the faster on OpenVINO); --backend pytorch quantises the "
                    "official PyTorch checkpoint with PT2E (torchao) into a torch.export "
                    "program, .int8.pt2, that runs compiled; --backend hf (whisper) transcribes "
                    "the clips and writes a Whisper folder, <model>.int8/, of int8 linear "
                    "layers with fixed activation scales. Writes the model and a "
                    ".calibration.json record beside it.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--benchmark", "-b", required=True, metavar="NAME")
    p.add_argument("--model", "-m", type=Path, required=True, metavar="PATH",
                   help="the fp32 ONNX model (--backend pytorch: the PyTorch checkpoint, "
                        "model.pytorch with bert_config.json beside it, or resnet50.pth; "
                        "--backend hf: the Whisper folder)")
    p.add_argument("--dataset", "-d", type=Path, required=True, metavar="PATH")
    p.add_argument("--vocab", type=Path, metavar="PATH", help="vocab.txt (BERT)")
    p.add_argument("--backend", default="onnxruntime", metavar="NAME",
                   help="runtime the model is for: onnxruntime (default: <model>.int8.onnx), "
                        "openvino (NNCF: <model>.int8.xml + .bin), pytorch (PT2E: "
                        "<model>.int8.pt2) or hf (whisper: the folder <model>.int8/)")
    p.add_argument("--output", "-o", type=Path, metavar="PATH",
                   help="where to write the int8 model (default <model>.int8.onnx, .int8.xml "
                        "for openvino, .int8.pt2 for pytorch, the folder <model>.int8 for hf)")
    p.add_argument("--calibration-list", metavar="NAME|FILE",
                   help="official option (ImageNet: option_1 default, option_2) or a file of "
                        "your own (sample file names or QSL indices, one a line)")
    p.add_argument("--method", default="minmax", choices=("minmax", "entropy", "percentile"),
                   help="how activation ranges are taken (default minmax; openvino, "
                        "pytorch and hf: minmax only)")
    p.add_argument("--force", action="store_true",
                   help="replace an --output an earlier calibrate wrote (never another file)")
    p.add_argument("--allow-missing", action="store_true",
                   help="calibrate on the samples of your --calibration-list FILE that the "
                        "dataset has (refused otherwise; the record and the output say which "
                        "were left out)")
    p.add_argument("--cache-dir", type=Path, metavar="DIR")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--task-option", dest="task_option", action="append", default=[],
                   type=_key_value, metavar="KEY=VALUE",
                   help="task options, as for run (e.g. sequence_length)")
    p.set_defaults(func=calibrate_command)


def calibrate_command(args: argparse.Namespace) -> int:
    # lazy: calibration and the runner (~70 modules) stay out of `mlharness --help`
    from mlharness.calibration import CalibrationRequest, calibrate, check_request
    from mlharness.runner.execute import RunProgress

    req = CalibrationRequest(
        benchmark=args.benchmark, model=args.model, dataset=args.dataset, backend=args.backend,
        vocab=args.vocab, cache_dir=args.cache_dir, output=args.output,
        calibration_list=args.calibration_list, method=args.method,
        task_option={k: parse_scalar(v) for k, v in args.task_option}, force=args.force,
        allow_missing=args.allow_missing)
    check_request(req)  # refusals before the line saying it starts
    prepare_process(args.backend)  # before the progress bar's thread (OpenVINO: one arena)
    console.print(escape(f"calibrating {args.model} for {args.benchmark} ({args.backend}) …"))
    with LiveProgress(enabled=not args.no_progress and sys.stderr.isatty()) as bar:
        record = calibrate(req, lambda done, total, label: bar(
            RunProgress("prepare", done, total, label=label)))
    samples = record["samples"]
    console.print(f"[green]wrote[/] {escape(record['model'])}")
    console.print(escape(f"  calibration: {samples['used']} of {samples['listed']} samples of "
                         f"{samples['list']}{'' if samples['official'] else ' (not official)'}; "
                         f"{record['recipe']}, {record['method']}"))
    if "note" in samples:
        console.print(f"  [yellow]note:[/] {escape(samples['note'])}")
    console.print(escape(f"  run it with: mlharness run -b {args.benchmark} --model "
                         f"{record['model']} --precision int8 --backend {args.backend} …"))
    return 0
