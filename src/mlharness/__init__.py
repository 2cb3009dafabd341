"""mlharness: a harness for MLPerf Inference built on the official LoadGen."""

__version__ = "0.1.0"
