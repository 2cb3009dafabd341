"""What every runtime's reduced-precision path shares: which layers stay fp32, the calibration
record beside a calibrated model, the refusal to run such a model as anything but int8, the
temporary file a quantiser writes before it is moved onto its target (its failure one
ModelError, its advice quiet), and :class:`Quantiser`, how ``mlharness calibrate`` makes a
backend's int8 model (the optional ``quantiser`` of the backend's class)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Protocol

from mlharness.errors import ConfigError, ModelError
from mlharness.tensors import IndexRange, TensorSpec

#: layers (Linear, MatMul/Gemm by a weight) with fewer outputs than this stay fp32 under int8 on
#: every runtime: BERT's 2-logit QA head costs nothing in fp32 and sits right on the logits
MIN_QUANTISED_OUTPUTS = 16


class CalibrationTask(Protocol):
    """What a quantiser reads of the benchmark's task (a backend never imports one)."""

    #: an attention model (quantisers keep its softmax/layer-norm paths in higher precision)
    transformer: bool

    @property
    def model_inputs(self) -> list[TensorSpec]: ...

    def index_ranges(self) -> dict[str, IndexRange]: ...

    def kept_fp32(self, ops: list[tuple[str, str]]) -> list[str]:
        """Names among the model's operations ``(name, type)`` that the quantiser keeps in
        fp32 beside its own choice (YOLO: the head's box decoding)."""
        ...


#: writes the int8 model: ``(source model, target, calibration batches, method, task)`` -> what
#: was done (for the calibration record). The batches are the tensor task's model batches
#: (``dict[str, np.ndarray]``), or a generation task's requests (``takes="requests"``: Whisper's
#: clips, transcribed by the quantiser itself)
Quantise = Callable[[Path, Path, list[Any], str, Any], dict[str, Any]]


@dataclass(frozen=True)
class Quantiser:
    """How ``mlharness calibrate --backend NAME`` makes that backend's int8 model: the optional
    ``quantiser`` class attribute of a backend (``backends.quantiser_of``)."""

    #: the int8 model's file suffix (``<model>.int8<suffix>`` unless ``--output`` names one)
    suffix: str
    #: what runs the int8 model, as the calibration record says it
    runs_on: str
    #: ModelError unless the source model is one this quantiser starts from (never int8)
    check_source: Callable[[Path], None]
    quantise: Quantise
    #: given ``--method``: refuses a method not offered or a quantiser package not installed,
    #: before any data is read (None: ``quantise`` checks the method itself)
    check_method: Callable[[str], object] | None = None
    #: the rows of the tables the source model's integer inputs index, read from its file before
    #: the data is prepared (None: known once ``quantise`` loads the model; it checks them then)
    index_limits: Callable[[Path], dict[str, int]] | None = None
    #: suffixes of the files written beside the int8 model (an OpenVINO IR's ``.bin``)
    beside: tuple[str, ...] = ()
    #: what the quantiser calibrates on: a tensor task's model batches, or a generation task's
    #: requests (the hf backend's Whisper; its int8 model is a folder: ``suffix`` "")
    takes: Literal["tensors", "requests"] = "tensors"

    def default_output(self, model: Path) -> Path:
        """``<model>.int8<suffix>``, beside ``model``."""
        return model.with_name(model.stem + ".int8" + self.suffix)

    def parts(self, target: Path) -> list[Path]:
        """The files an int8 model written to ``target`` consists of."""
        return [target, *(target.with_suffix(s) for s in self.beside)]


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
