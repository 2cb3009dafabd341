"""``mlharness calibrate``: a calibrated int8 model from a benchmark's official calibration list.

The list (rules data, ``rules/calibration_lists.py``) picks the samples; the task pre-processes
them exactly as a run feeds them; the ``--backend``'s quantiser (the ``quantiser`` its class
declares, :class:`mlharness.backends.quantised.Quantiser`) measures activation ranges on them and
writes the int8 model, ``<model>.int8`` with the quantiser's suffix (e.g. ``.onnx``), and
``<output file name>.calibration.json`` beside it records what was done. A run with
``--precision int8`` on that model copies the record into ``run.json``. It refuses a model that
is already int8, an output it did not write (``force`` replaces only
one it did), and samples an own list names that the dataset lacks (unless ``allow_missing``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlharness.backends import check_index_ranges, quantiser_of, quantising_backends
from mlharness.backends.quantised import Quantiser, calibration_file, calibration_path
from mlharness.errors import ConfigError, DatasetError
from mlharness.files import sha256_file, write_text_atomic
from mlharness.rules.calibration_lists import official_list
from mlharness.runner.rundir import now_iso
from mlharness.spec import RunSpec
from mlharness.sut.assemble import task_options, tensor_task
from mlharness.tasks import create_task
from mlharness.tasks.base import GenerationTask


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
        path_of = getattr(task, "sample_path", None) or task.image_path  # audio: sample_path
        indices = [i for i in range(total) if path_of(i).name in names]
        present = {path_of(i).name for i in indices}
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


def quantiser(backend: str) -> Quantiser:
    """Backend ``backend``'s quantiser; ConfigError naming the backends that have one."""
    found = quantiser_of(backend)
    if found is None:
        raise ConfigError(f"calibration for backend {backend!r} is not built",
                          hint="use --backend " + " or ".join(quantising_backends()))
    return found


def check_request(req: CalibrationRequest) -> Path:
    """The int8 model's path, once the request is one calibrate may do (ConfigError or
    ModelError otherwise): a backend with a quantiser, a source model it starts from, a new
    output or one an earlier calibrate wrote (``force``). Cheap: no data is read."""
    quantising = quantiser(req.backend)
    quantising.check_source(req.model)
    target = req.output or quantising.default_output(req.model)
    suffix = quantising.suffix
    if suffix and target.suffix != suffix:  # "": the int8 model is a folder (hf's Whisper)
        raise ConfigError(f"the {req.backend} int8 model is written as a {suffix} file, not "
                          f"{target.name}", hint=f"pass --output MODEL.int8{suffix}, or drop it")
    _check_target(req.model, target, quantising, req.force)
    return target


def calibrate(req: CalibrationRequest, progress: Any = None) -> dict[str, Any]:
    """Build the int8 model; return the record written beside it. ``progress(done, total,
    label)`` hears the pre-processing, then the quantising (``total`` 0: no count)."""
    target = check_request(req)
    quantising = quantiser(req.backend)
    if quantising.check_method is not None:  # refused before the data is read
        quantising.check_method(req.method)
    spec = RunSpec(benchmark=req.benchmark, model=req.model, dataset=req.dataset,
                   vocab=req.vocab, cache_dir=req.cache_dir, backend=req.backend,
                   task_option=dict(req.task_option or {}))  # read by the task (input names)
    made = create_task(req.benchmark, task_options(spec))
    if quantising.takes == "requests":  # a generation task: the quantiser runs the requests
        if not isinstance(made, GenerationTask):
            raise ConfigError(f"the {req.backend} quantiser calibrates generation benchmarks "
                              f"(whisper), not {req.benchmark}",
                              hint="use --backend onnxruntime, openvino or pytorch")
    else:
        made = tensor_task(made)
        if quantising.index_limits is not None:  # else known once the quantiser loads it
            check_index_ranges(made.index_ranges(), quantising.index_limits(req.model),
                               str(req.model))
    made.prepare(progress)
    indices, about = select(made, req.benchmark, req.calibration_list, req.allow_missing)
    made.load_samples(indices)
    batches: list[Any]
    if isinstance(made, GenerationTask):
        batches = [made.request(i) for i in indices]
    else:
        step = max(1, req.batch_size)
        batches = [inputs for i in range(0, len(indices), step)
                   for inputs in made.model_batches(indices[i:i + step])]
    target.parent.mkdir(parents=True, exist_ok=True)
    if progress is not None:  # no count to show: the quantiser reports nothing while it works
        progress(0, 0, f"quantising on {len(indices)} samples ({req.backend})")
    done = quantising.quantise(req.model, target, batches, req.method, made)
    record = {
        "format": RECORD_FORMAT,
        "created": now_iso(),
        "benchmark": req.benchmark, "backend": req.backend, "runs_on": quantising.runs_on,
        "precision": "int8", "source_model": str(req.model.resolve()),
        "source_sha256": _digest(req.model), "model": str(target.resolve()),
        "dataset": str(req.dataset), "samples": about, "qsl_indices": indices, **done,
    }
    write_text_atomic(calibration_file(target), json.dumps(record, indent=2) + "\n")
    return record


def _digest(model: Path) -> str:
    """sha256 of the model file; of a model folder (hf's Whisper), of its files' names and
    sha256s, one ``name digest`` line each in name order."""
    if not model.is_dir():
        return sha256_file(model)
    lines = "".join(f"{p.name} {sha256_file(p)}\n" for p in sorted(model.iterdir())
                    if p.is_file())
    return hashlib.sha256(lines.encode()).hexdigest()


def _check_target(model: Path, target: Path, quantising: Quantiser, force: bool) -> None:
    """``target`` is new, or (with ``force``) a model an earlier calibrate wrote: its record
    beside it names it. Never the source model, never a file calibrate did not write."""
    if target.resolve() == model.resolve():
        raise ConfigError(f"--output {target} is the model being calibrated",
                          hint="give another --output, or drop it for MODEL.int8" +
                               quantising.suffix)
    existing = [p for p in quantising.parts(target) if p.exists() or p.is_symlink()]
    if not existing:
        return
    if not force:
        raise ConfigError(f"{existing[0]} exists: calibrate does not overwrite it",
                          hint="pass --force to replace a model calibrate wrote, or another "
                               "--output")
    record = calibration_path(target)
    owned = False
    if record is not None and (target.is_file() or target.is_dir()) and not target.is_symlink():
        try:
            data = json.loads(record.read_text(encoding="utf-8"))
            owned = (data.get("format") == RECORD_FORMAT and
                     Path(str(data.get("model"))).name == target.name)
        except (OSError, ValueError, AttributeError):
            owned = False
    if not owned:
        raise ConfigError(f"--force replaces only a model calibrate wrote; {target} has no "
                          "calibration record naming it", hint="give another --output")
