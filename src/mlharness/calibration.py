"""``mlharness calibrate``: a calibrated int8 model from a benchmark's official calibration list.

The list (rules data, ``rules/calibration_lists.py``) picks the samples; the task pre-processes
them exactly as a run feeds them; the runtime's quantiser measures activation ranges on them and
writes the int8 model (onnxruntime: a QDQ ONNX model, ``<model>.int8.onnx``; openvino: an NNCF
int8 IR, ``<model>.int8.xml``; pytorch: a PT2E-quantised torch.export program of the official
checkpoint, ``<model>.int8.pt2``), and ``<output file name>.calibration.json`` beside it records
what was done. A run with ``--precision int8`` on that model copies the record into ``run.json``.
It refuses a model that is already int8, an output it did not write (``force`` replaces only
one it did), and samples an own list names that the dataset lacks (unless ``allow_missing``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlharness.backends import BackendOptions, backend_options, check_index_ranges
from mlharness.backends.onnx_precision import is_quantized, quantize_calibrated
from mlharness.backends.onnx_shapes import onnx_index_limits
from mlharness.backends.openvino_int8 import quantize_nncf, require_nncf
from mlharness.backends.pytorch import PyTorchBackend
from mlharness.backends.pytorch_int8 import quantize_pt2e, require_pt2e
from mlharness.backends.quantised import calibration_file, calibration_path
from mlharness.errors import ConfigError, DatasetError, ModelError
from mlharness.files import sha256_file, write_text_atomic
from mlharness.names import Precision
from mlharness.rules.calibration_lists import official_list
from mlharness.runner.rundir import now_iso
from mlharness.spec import RunSpec
from mlharness.sut.assemble import task_options
from mlharness.tasks import create_task


@dataclass(frozen=True)
class Quantiser:
    """What ``--backend`` calibrates for: the file its quantiser writes, and what the record
    says about running it."""

    suffix: str
    runs_on: str


QUANTISERS = {
    "onnxruntime": Quantiser(".onnx", "onnxruntime runs the QDQ model with int8 kernels "
                                      "(OpenVINO reads it too)"),
    "openvino": Quantiser(".xml", "OpenVINO runs the NNCF-quantised IR with its int8 kernels"),
    "pytorch": Quantiser(".pt2", "PyTorch runs the PT2E-quantised program compiled by inductor "
                                 "(oneDNN int8 kernels)"),
}


@dataclass
class CalibrationRequest:
    benchmark: str
    model: Path
    dataset: Path
    backend: str = "onnxruntime"
    vocab: Path | None = None
    cache_dir: Path | None = None
    output: Path | None = None
    calibration_list: str | None = None  # an official option name, or a file of your own
    method: str = "minmax"
    batch_size: int = 1
    task_option: dict[str, Any] | None = None
    force: bool = False  # replace an output an earlier calibrate wrote
    allow_missing: bool = False  # calibrate on the samples of an own list the dataset has


RECORD_FORMAT = "mlharness-calibration/1"
#: how many missing samples an error names
_SHOWN = 5


def select(task: Any, benchmark: str, choice: str | None, allow_missing: bool = False
           ) -> tuple[list[int], dict[str, Any]]:
    """QSL indices of the calibration samples present in the dataset, and how they were chosen.

    An own list naming samples the dataset lacks is refused (naming them) unless
    ``allow_missing``; an official list on a partial dataset is used with a note (a subset of
    the official set is the usual test setup)."""
    if choice and Path(choice).is_file():
        entries = [s.strip() for s in Path(choice).read_text().splitlines() if s.strip()]
        kind = "index" if all(e.isdigit() for e in entries) else "file"
        about = {"list": str(Path(choice).resolve()), "official": False}
    else:
        cal = official_list(benchmark, choice)
        entries, kind = cal.entries(), cal.kind
        about = {"list": cal.source, "option": cal.name, "official": True}
    total = task.total_count()
    if kind == "index":
        indices = sorted({int(e) for e in entries if int(e) < total})
        missing = [e for e in entries if int(e) >= total]
    else:
        names = set(entries)
        indices = [i for i in range(total) if task.image_path(i).name in names]
        present = {task.image_path(i).name for i in indices}
        missing = [e for e in entries if e not in present]
    if missing and not about["official"]:
        shown = ", ".join(missing[:_SHOWN]) + (", …" if len(missing) > _SHOWN else "")
        if not allow_missing:
            raise DatasetError(f"{len(missing)} of the {len(entries)} samples "
                               f"{Path(str(choice)).name} "
                               f"names are not in this dataset: {shown}",
                               hint="fix the list or --dataset, or pass --allow-missing to "
                                    "calibrate on the samples that are there")
        about["missing"] = missing
        about["note"] = (f"--allow-missing: {len(missing)} of the {len(entries)} listed samples "
                         f"are not in this dataset and were left out ({shown})")
    if not indices:
        raise DatasetError(f"none of the {len(entries)} calibration samples is in this dataset "
                           f"({total} samples)",
                           hint="use the full official dataset, or --calibration-list FILE")
    about.update(listed=len(entries), used=len(indices))
    if about["official"] and len(indices) < len(entries) and "note" not in about:
        about["note"] = (f"only {len(indices)} of the {len(entries)} listed samples are in this "
                         "dataset: not the official calibration set")
    return indices, about


def output_path(model: Path, output: Path | None, backend: str = "onnxruntime") -> Path:
    return output or model.with_name(model.stem + ".int8" + QUANTISERS[backend].suffix)


def check_request(req: CalibrationRequest) -> Path:
    """The int8 model's path, once the request is one calibrate may do (ConfigError or
    ModelError otherwise): a backend with a quantiser, an fp32 source, a new output or one an
    earlier calibrate wrote (``force``). Cheap: no data is read."""
    if req.backend not in QUANTISERS:
        raise ConfigError(f"calibration for backend {req.backend!r} is not built",
                          hint="use --backend " + " or ".join(QUANTISERS))
    _check_source(req.model, req.backend)
    target = output_path(req.model, req.output, req.backend)
    suffix = QUANTISERS[req.backend].suffix
    if target.suffix != suffix:
        raise ConfigError(f"the {req.backend} int8 model is written as a {suffix} file, not "
                          f"{target.name}", hint=f"pass --output MODEL.int8{suffix}, or drop it")
    _check_target(req.model, target, req.backend, req.force)
    return target


def calibrate(req: CalibrationRequest, progress: Any = None) -> dict[str, Any]:
    """Build the int8 model; return the record written beside it. ``progress(done, total,
    label)`` hears the pre-processing, then the quantising (``total`` 0: no count)."""
    target = check_request(req)
    if req.backend == "openvino":  # refused before the data is read
        require_nncf(req.method)
    elif req.backend == "pytorch":
        require_pt2e(req.method)
    spec = RunSpec(benchmark=req.benchmark, model=req.model, dataset=req.dataset,
                   vocab=req.vocab, cache_dir=req.cache_dir, backend=req.backend,
                   task_option=dict(req.task_option or {}))  # read by the task (input names)
    task = create_task(req.benchmark, task_options(spec))
    if req.backend != "pytorch":  # the checkpoint's tables are known once it is loaded
        check_index_ranges(task.index_ranges(), onnx_index_limits(req.model), str(req.model))
    task.prepare(progress)
    indices, about = select(task, req.benchmark, req.calibration_list, req.allow_missing)
    task.load_samples(indices)
    step = max(1, req.batch_size)
    batches = [task.batch_inputs(indices[i:i + step]) for i in range(0, len(indices), step)]
    target.parent.mkdir(parents=True, exist_ok=True)
    if progress is not None:  # no count to show: the quantiser reports nothing while it works
        progress(0, 0, f"quantising on {len(indices)} samples ({req.backend})")
    if req.backend == "openvino":
        done = quantize_nncf(req.model, target, batches, req.method, task.transformer)
    elif req.backend == "pytorch":
        done = _quantize_checkpoint(req.model, target, batches, req.method, task)
    else:
        done = quantize_calibrated(req.model, target, batches, req.method)
    record = {
        "format": RECORD_FORMAT,
        "created": now_iso(),
        "benchmark": req.benchmark, "backend": req.backend, "runs_on": QUANTISERS[req.backend].runs_on,
        "precision": "int8", "source_model": str(req.model.resolve()),
        "source_sha256": sha256_file(req.model), "model": str(target.resolve()),
        "dataset": str(req.dataset), "samples": about, "qsl_indices": indices, **done,
    }
    write_text_atomic(calibration_file(target), json.dumps(record, indent=2) + "\n")
    return record


def _check_source(model: Path, backend: str) -> None:
    """The fp32 model the quantiser starts from: ONNX, or for pytorch the official checkpoint;
    never a model that is already int8 (``m.int8.int8.onnx`` means nothing)."""
    if backend == "pytorch":
        if not model.is_file() or model.suffix in (".onnx", QUANTISERS["pytorch"].suffix):
            raise ModelError(f"calibration for pytorch needs the fp32 checkpoint, got {model}",
                             hint="pass --model model.pytorch (BERT, with bert_config.json "
                                  "beside it) or resnet50.pth")
    elif not model.is_file() or model.suffix != ".onnx":
        raise ModelError(f"calibration needs an fp32 ONNX model, got {model}",
                         hint="pass --model path/to/model.onnx")
    elif _is_int8(model):
        raise ModelError(f"{model} is already int8 (a quantised model): calibrate starts from "
                         "the fp32 model", hint="pass the fp32 model it was made from")


def _is_int8(model: Path) -> bool:
    if calibration_path(model) is not None:
        return True
    try:
        return is_quantized(model)
    except Exception:  # noqa: BLE001 - not a readable ONNX file: the quantiser says so later
        return False


def _check_target(model: Path, target: Path, backend: str, force: bool) -> None:
    """``target`` is new, or (with ``force``) a model an earlier calibrate wrote: its record
    beside it names it. Never the source model, never a file calibrate did not write."""
    if target.resolve() == model.resolve():
        raise ConfigError(f"--output {target} is the model being calibrated",
                          hint="give another --output, or drop it for MODEL.int8" +
                               QUANTISERS[backend].suffix)
    parts = [target, *([target.with_suffix(".bin")] if backend == "openvino" else [])]
    existing = [p for p in parts if p.exists() or p.is_symlink()]
    if not existing:
        return
    if not force:
        raise ConfigError(f"{existing[0]} exists: calibrate does not overwrite it",
                          hint="pass --force to replace a model calibrate wrote, or another "
                               "--output")
    record = calibration_path(target)
    owned = False
    if record is not None and target.is_file() and not target.is_symlink():
        try:
            data = json.loads(record.read_text(encoding="utf-8"))
            owned = (data.get("format") == RECORD_FORMAT and
                     Path(str(data.get("model"))).name == target.name)
        except (OSError, ValueError, AttributeError):
            owned = False
    if not owned:
        raise ConfigError(f"--force replaces only a model calibrate wrote; {target} has no "
                          "calibration record naming it", hint="give another --output")


def _quantize_checkpoint(model: Path, target: Path, batches: list[dict], method: str,
                         task: Any) -> dict[str, Any]:
    """The checkpoint loaded in fp32 as a pytorch run loads it, then quantised by PT2E."""
    backend = PyTorchBackend()
    backend.load(model, BackendOptions(precision=Precision.FP32,
                                       task_inputs=list(task.model_inputs),
                                       extra=backend_options(PyTorchBackend, {})))
    check_index_ranges(task.index_ranges(), backend.index_limits, str(model))
    names = [spec.name for spec in backend.inputs]
    return quantize_pt2e(backend.net, backend.arch, names, target, batches, method)
