"""The SUT engine: queues, batches and dispatches LoadGen's samples to a backend."""

from mlharness.sut.batching import BatchPolicy, policy_for
from mlharness.sut.engine import Engine
from mlharness.sut.stream import StreamEngine

__all__ = ["BatchPolicy", "Engine", "StreamEngine", "policy_for"]
