"""Backend registry: name -> the class that implements the Backend protocol."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from mlharness.backends.base import (Backend, BackendBase, BackendOptions, GenerationRequest,
                                    SampleBackend, StreamingBackend, check_index_ranges,
                                    check_signature, is_streaming)
from mlharness.backends.quantised import Quantiser
from mlharness.errors import ConfigError, HarnessError
from mlharness.options import FreeOptions, Options, parse_options
from mlharness.tensors import TensorSpec

__all__ = ["Backend", "BackendBase", "BackendOptions", "BACKENDS", "GenerationRequest", "SampleBackend",
           "StreamingBackend", "backend_options", "is_streaming",
           "create_backend", "check_index_ranges", "check_signature", "declared_inputs",
           "framework_of", "model_framework_of", "quantiser_of", "quantising_backends"]

#: name -> ("module:Class", pip extra that provides it)
BACKENDS: dict[str, tuple[str, str]] = {
    "onnxruntime": ("mlharness.backends.onnxruntime:OnnxRuntimeBackend", ""),  # a dependency
    "openvino": ("mlharness.backends.openvino:OpenVinoBackend", "openvino"),
    "pytorch": ("mlharness.backends.pytorch:PyTorchBackend", "torch"),
    "noop": ("mlharness.backends.noop:NoopBackend", ""),
    # text generation (LLM benchmarks): the streaming SUT path (backends/base.py StreamingBackend)
    "openai": ("mlharness.backends.openai:OpenAIBackend", ""),  # standard library only
    "hf": ("mlharness.backends.hf:HfBackend", "llm,torch"),  # transformers + torch
}


def create_backend(name: str) -> BackendBase:
    """Instantiate backend ``name``; a missing runtime becomes a ConfigError with the install hint.

    ``name`` may also be ``package.module:Class`` for a backend of your own (it must be importable
    in the run's child process, i.e. on ``sys.path``, and subclass :class:`Backend` or
    :class:`StreamingBackend`).
    """
    return backend_class(name)()


def backend_class(name: str) -> type[BackendBase]:
    """The class of backend ``name`` (built in, or ``module:Class`` of your own), imported;
    ConfigError for an unknown name, a runtime not installed, or a class that is no backend."""
    if ":" in name and name not in BACKENDS:
        module_name, cls_name = name.split(":", 1)
        try:
            cls = getattr(importlib.import_module(module_name), cls_name)
        except HarnessError:
            raise
        except Exception as exc:  # noqa: BLE001 - a backend of the user's own may raise anything
            raise ConfigError(f"cannot load backend {name!r}: {type(exc).__name__}: {exc}",
                              hint="give an importable 'module:Class' on sys.path") from exc
        if not (isinstance(cls, type) and issubclass(cls, BackendBase)):
            raise ConfigError(f"backend {name!r} is not a backend class",
                              hint="subclass mlharness.backends.Backend (a tensor runtime) or "
                                   "StreamingBackend (text generation); docs/architecture.md")
        return cls
    check_backend_name(name)
    target, extra = BACKENDS[name]
    module_name, cls_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"backend {name!r} is not installed ({exc})",
            hint=f"pip install 'mlharness[{extra}]'" if extra else "reinstall mlharness",
        ) from exc
    cls = getattr(module, cls_name)
    assert issubclass(cls, BackendBase), cls  # the registry names backend classes only
    return cls


def backend_options(backend: object, table: dict[str, Any]) -> Options:
    """``--backend-option`` pairs as the ``options_model`` the backend's class declares itself,
    checked, defaults filled in; a class that declares none (e.g. a backend of your own built on
    onnxruntime) receives them as :class:`FreeOptions`. Unknown keys or bad values: ConfigError
    naming them."""
    cls = backend if isinstance(backend, type) else type(backend)
    model = vars(cls).get("options_model")
    if model is None:
        return parse_options(FreeOptions, table, "backend option", "--backend-option")
    return parse_options(model, table, f"{getattr(backend, 'name', 'backend')} backend option",
                         "--backend-option")


def _builtin_class(name: str) -> type[BackendBase] | None:
    """A built-in backend's class; None for a backend of your own or one not installed (its
    load says why it cannot run), so these questions never import user code in the parent."""
    if name not in BACKENDS:
        return None
    try:
        return backend_class(name)
    except ConfigError:
        return None


def declared_inputs(name: str, model: Path | None) -> list[TensorSpec] | None:
    """The inputs ``model`` declares, as backend ``name`` reads them without loading it (None:
    unknown — no model, a backend of your own, or one that cannot tell)."""
    cls = _builtin_class(name)
    if cls is None or model is None or not Path(model).is_file():
        return None
    return cls.declared_inputs(Path(model))


def generates_text(name: str) -> bool:
    """Whether backend ``name`` is a text-generation (streaming) backend, known without loading
    it (a backend of your own says so by subclassing ``StreamingBackend``)."""
    cls = _builtin_class(name)
    if cls is None and ":" in name:
        try:
            cls = backend_class(name)
        except HarnessError:
            return False
    return cls is not None and cls.generates


def framework_of(name: str) -> str | None:
    """The framework (name and version) backend ``name`` runs on, for the system description."""
    cls = _builtin_class(name)
    return cls.framework() if cls is not None else None


def model_framework_of(name: str) -> str | None:
    """The catalogue ``framework`` of the model files backend ``name`` reads, so ``run`` can take
    its model from the cache; None: no model from the cache."""
    cls = _builtin_class(name)
    return cls.model_framework if cls is not None else None


def quantiser_of(name: str) -> Quantiser | None:
    """How ``mlharness calibrate`` makes backend ``name``'s int8 model; None: it calibrates for
    no such backend."""
    cls = _builtin_class(name)
    return cls.quantiser if cls is not None else None


def quantising_backends() -> list[str]:
    """The built-in backends with a quantiser, in registry order (imports each backend's
    module: a refusal's hint, not a fast path)."""
    return [name for name in BACKENDS if quantiser_of(name) is not None]


def prepare_process(name: str) -> None:
    """What backend ``name`` needs of its process before any other thread starts; a backend
    that cannot be imported needs nothing here (its load says why it cannot run)."""
    cls = _builtin_class(name)
    if cls is not None:
        cls.prepare_process()


def process_env(name: str) -> dict[str, str]:
    """The environment a process started to run backend ``name`` needs from its start (Ray
    actors get it as their runtime environment)."""
    cls = _builtin_class(name)
    return dict(cls.process_env) if cls is not None else {}


def check_backend_name(name: str) -> None:
    """ConfigError unless ``name`` is a built-in backend or a ``module:Class`` of your own."""
    if name not in BACKENDS and ":" not in name:
        raise ConfigError(
            f"unknown backend {name!r}", hint="choose one of: " + ", ".join(sorted(BACKENDS))
        )


def check_model_file(name: str, model: Path) -> None:
    """ModelError when backend ``name`` reads its model from a file and ``model`` is no file."""
    cls = _builtin_class(name)
    if cls is not None and cls.reads_model_file:
        cls.model_file(model)


def check_backend_options(name: str, table: dict[str, Any]) -> None:
    """Check the name and the options of a backend before anything runs (the options of a
    backend of your own are checked in the run's worker, where it is importable)."""
    check_backend_name(name)
    cls = _builtin_class(name)
    if cls is not None:  # not importable: create_backend reports it with the install hint
        backend_options(cls, table)
