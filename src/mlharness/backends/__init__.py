"""Backend registry: name -> the class that implements the Backend protocol."""

from __future__ import annotations

import importlib

from mlharness.backends.base import Backend, BackendOptions, SampleBackend, check_signature
from mlharness.errors import ConfigError, HarnessError

__all__ = ["Backend", "BackendOptions", "BACKENDS", "SampleBackend", "create_backend",
           "check_signature"]

#: name -> ("module:Class", pip extra that provides it)
BACKENDS: dict[str, tuple[str, str]] = {
    "onnxruntime": ("mlharness.backends.onnxruntime:OnnxRuntimeBackend", ""),  # a dependency
    "openvino": ("mlharness.backends.openvino:OpenVinoBackend", "openvino"),
    "pytorch": ("mlharness.backends.pytorch:PyTorchBackend", "torch"),
    "noop": ("mlharness.backends.noop:NoopBackend", ""),
    "remote": ("mlharness.backends.remote:RemoteBackend", ""),
    "ray": ("mlharness.backends.ray_backend:RayBackend", "ray"),
}


def create_backend(name: str) -> Backend:
    """Instantiate backend ``name``; a missing runtime becomes a ConfigError with the install hint.

    ``name`` may also be ``package.module:Class`` for a backend of your own (it must be importable
    in the run's child process, i.e. on ``sys.path``).
    """
    if ":" in name and name not in BACKENDS:
        module_name, cls_name = name.split(":", 1)
        try:
            return getattr(importlib.import_module(module_name), cls_name)()
        except HarnessError:
            raise
        except Exception as exc:  # noqa: BLE001 - a backend of the user's own may raise anything
            raise ConfigError(f"cannot load backend {name!r}: {type(exc).__name__}: {exc}",
                              hint="give an importable 'module:Class' on sys.path") from exc
    if name not in BACKENDS:
        raise ConfigError(
            f"unknown backend {name!r}", hint="choose one of: " + ", ".join(sorted(BACKENDS))
        )
    target, extra = BACKENDS[name]
    module_name, cls_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"backend {name!r} is not installed ({exc})",
            hint=f"pip install 'mlharness[{extra}]'" if extra else "reinstall mlharness",
        ) from exc
    return getattr(module, cls_name)()
