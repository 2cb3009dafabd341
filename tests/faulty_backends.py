"""Test-only backends (importable as ``faulty_backends:Name`` in the run's child process)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.backends.base import Backend, BackendOptions
from mlharness.backends.onnxruntime import OnnxRuntimeBackend


class FailingBackend(OnnxRuntimeBackend):
    """The real demo model, but raises on the N-th batch (N from $FAIL_ON_BATCH, default 3)."""

    name = "failing"

    def load(self, model: Path | None, options: BackendOptions) -> None:
        super().load(model, options)
        self.fail_on = int(os.environ.get("FAIL_ON_BATCH", "3"))
        self.calls = 0
        self.lock = threading.Lock()

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self.lock:
            self.calls += 1
            n = self.calls
        if n >= self.fail_on:
            raise RuntimeError(f"injected failure on batch {n}")
        return super().predict(inputs)


class StallingBackend(OnnxRuntimeBackend):
    """Answers the first batch, then never returns."""

    name = "stalling"

    def load(self, model: Path | None, options: BackendOptions) -> None:
        super().load(model, options)
        self.calls = 0

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.calls += 1
        if self.calls > 1:
            time.sleep(3600)
        return super().predict(inputs)


class DyingBackend(OnnxRuntimeBackend):
    """Kills its own process on the second batch, as a segfaulting runtime would."""

    def predict(self, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls > 1:
            os._exit(139)
        return super().predict(inputs)


class HangingLoadBackend(Backend):
    """Never finishes loading its model (a runtime stuck compiling or waiting on a lock)."""

    name = "hanging-load"

    def load(self, model: Path | None, options: BackendOptions) -> None:
        time.sleep(3600)

    @property
    def inputs(self) -> list[Any]:
        return []

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise AssertionError("never reached")

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


class RaisingLoadBackend(HangingLoadBackend):
    """Raises a plain exception while loading (a runtime that rejects the model)."""

    name = "raising-load"

    def load(self, model: Path | None, options: BackendOptions) -> None:
        raise RuntimeError("injected failure while loading the model")


class ExitingLoadBackend(HangingLoadBackend):
    """Kills its own process while loading, as a runtime crashing at start-up would."""

    name = "exiting-load"

    def load(self, model: Path | None, options: BackendOptions) -> None:
        os._exit(134)


class SlowNoopBackend(Backend):
    """The noop backend, but every batch takes $SLOW_BATCH_S seconds (default 0.05): a run that
    lasts long enough to be signalled mid-test."""

    name = "slow-noop"

    def load(self, model: Path | None, options: BackendOptions) -> None:
        self.delay = float(os.environ.get("SLOW_BATCH_S", "0.05"))

    @property
    def inputs(self) -> None:
        return None  # no model: accepts whatever the task feeds (like the noop backend)

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        time.sleep(self.delay)
        n = len(next(iter(inputs.values())))
        return {"label": np.zeros((n, 1), dtype=np.int64)}  # the demo task reads 'label'

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


class SlowLoadingBackend(OnnxRuntimeBackend):
    """Takes 8 s to load, as a model compiled at load does, and says so (load_allowance_s)."""

    name = "slow-loading"

    @staticmethod
    def load_allowance_s(options: BackendOptions, model: Path | None) -> float:
        return 30.0

    def load(self, model: Path | None, options: BackendOptions) -> None:
        time.sleep(8)
        super().load(model, options)


class BusyLoadingBackend(OnnxRuntimeBackend):
    """Computes for 7 s at load, asking for no allowance: a load that imports and builds on a
    busy machine (its CPU time grows, so the stall clock sees it working)."""

    name = "busy-loading"

    def load(self, model: Path | None, options: BackendOptions) -> None:
        end = time.monotonic() + 7
        while time.monotonic() < end:
            sum(range(10_000))
        super().load(model, options)


class SlowInstanceBackend(OnnxRuntimeBackend):
    """Takes 2.5 s to load each instance, asking for no allowance (a large model's session)."""

    name = "slow-instance"

    def load(self, model: Path | None, options: BackendOptions) -> None:
        time.sleep(2.5)
        super().load(model, options)


class SegfaultingBackend(OnnxRuntimeBackend):
    """Crashes with SIGSEGV on the second batch, as a runtime's native bug does."""

    def predict(self, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls > 1:
            import ctypes

            ctypes.string_at(0)  # reads address 0: SIGSEGV
        return super().predict(inputs)
