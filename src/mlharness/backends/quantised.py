"""What every runtime's reduced-precision path shares: which layers stay fp32, the calibration
record beside a calibrated model, the refusal to run such a model as anything but int8, and the
temporary file a quantiser writes before it is moved onto its target (its failure one
ModelError, its advice quiet)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Iterator

from mlharness.errors import ConfigError, ModelError

#: layers (Linear, MatMul/Gemm by a weight) with fewer outputs than this stay fp32 under int8 on
#: every runtime: BERT's 2-logit QA head costs nothing in fp32 and sits right on the logits
MIN_QUANTISED_OUTPUTS = 16


def calibration_file(model: Path) -> Path:
    """Where ``mlharness calibrate`` records how ``model`` (its output) was made: named after
    the whole file name (``m.int8.onnx.calibration.json``), so the onnxruntime and the OpenVINO
    model made from one model (``m.int8.onnx``, ``m.int8.xml``) each keep their own record."""
    return model.with_name(model.name + ".calibration.json")


def _legacy_file(model: Path) -> Path:
    """The name records had before (``m.int8.calibration.json``), shared by every runtime's
    output of one model: used only when the record inside names ``model``."""
    return model.with_name(model.stem + ".calibration.json")


def calibration_path(model: Path) -> Path | None:
    """The record describing ``model``, or None: its own file, else an older-named one whose
    ``model`` is this file."""
    model = Path(model)
    own = calibration_file(model)
    if own.is_file():
        return own
    legacy = _legacy_file(model)
    if legacy.is_file():
        try:
            named = json.loads(legacy.read_text(encoding="utf-8")).get("model")
        except (OSError, ValueError, AttributeError):
            return None
        if isinstance(named, str) and Path(named).name == model.name:
            return legacy
    return None


def calibration_record(model: Path) -> dict | None:
    """The calibration record of a calibrated model (:func:`calibration_path`), or None."""
    path = calibration_path(Path(model))
    return json.loads(path.read_text()) if path is not None else None


def refuse_mislabelled(model: Path, precision: str) -> None:
    """A calibrated int8 model run as fp32/bf16 would be int8 silently: refuse."""
    if precision != "int8" and calibration_path(Path(model)) is not None:
        raise ConfigError(f"{model} is a calibrated int8 model, but --precision is {precision}",
                          hint="pass --precision int8 (the run then records the calibration)")


@contextlib.contextmanager
def quantised_file(model: Path, target: Path, what: str, hint: str,
                   suffix: str = ".onnx") -> Iterator[str]:
    """A temporary path for the quantiser to write; moved onto ``target`` when it succeeds, its
    failure (the quantisers raise assorted types) turned into one ModelError line. The
    quantisers' advice on the root logger is kept quiet meanwhile."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp" + suffix)
    os.close(fd)
    try:
        with quiet_loggers(""):  # "": the root logger
            yield tmp
        os.chmod(tmp, 0o644)  # as write_bytes_atomic leaves a file (mkstemp made it 0600)
        os.replace(tmp, target)
    except Exception as exc:  # noqa: BLE001 - reported as a ModelError
        raise ModelError(f"{what} of {model} failed: {exc}".splitlines()[0], hint=hint) from exc
    finally:
        Path(tmp).unlink(missing_ok=True)


@contextlib.contextmanager
def quiet_loggers(*names: str) -> Iterator[None]:
    """Loggers ``names`` at ERROR meanwhile: the runtimes' advice is not the user's."""
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
