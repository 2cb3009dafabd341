"""The SUT engine: queues, batches and dispatches LoadGen's samples to a backend."""

from mlharness.sut.batching import BatchPolicy, policy_for
from mlharness.sut.engine import Engine

__all__ = ["BatchPolicy", "Engine", "policy_for"]
