"""The names every layer shares, each declared once: LoadGen's scenarios and test modes, the
numeric precisions, and their defaults.

String enums: a member equals, hashes and prints as its value (``Scenario.SERVER == "Server"``),
so records, TOML files and LoadGen's own names read and write them unchanged.
"""

from __future__ import annotations

from enum import StrEnum


class Scenario(StrEnum):
    """A LoadGen scenario (``loadgen/test_settings.h``: ``TestScenario``)."""

    SINGLE_STREAM = "SingleStream"
    MULTI_STREAM = "MultiStream"
    SERVER = "Server"
    OFFLINE = "Offline"
    #: the LLM benchmarks' Server under tighter token latencies: LoadGen's Server scenario with
    #: the model key ``<model>-interactive`` (loadgen/mlperf.conf)
    INTERACTIVE = "Interactive"

    @classmethod
    def parse(cls, text: object) -> Scenario | None:
        """The scenario named ``text`` in any letter case, or None."""
        return _BY_LOWER.get(str(text).lower())

    @property
    def latency_metric(self) -> bool:
        """Its result is a latency (SingleStream, MultiStream), not a throughput."""
        return self in LATENCY_SCENARIOS

    @property
    def loadgen(self) -> Scenario:
        """The LoadGen scenario that runs it (Interactive runs as Server)."""
        return Scenario.SERVER if self is Scenario.INTERACTIVE else self

    @property
    def qps_target(self) -> bool:
        """It takes a target QPS (Server, Offline) rather than an expected latency."""
        return self in QPS_SCENARIOS


_BY_LOWER = {s.value.lower(): s for s in Scenario}
#: the scenarios whose result is a latency, and those that take a target QPS; plain names test
#: membership too (``"Server" in QPS_SCENARIOS``)
LATENCY_SCENARIOS = frozenset({Scenario.SINGLE_STREAM, Scenario.MULTI_STREAM})
QPS_SCENARIOS = frozenset({Scenario.SERVER, Scenario.OFFLINE, Scenario.INTERACTIVE})
#: the four scenarios LoadGen itself knows (``TestScenario``), in its order
LOADGEN_SCENARIOS = (Scenario.SINGLE_STREAM, Scenario.MULTI_STREAM, Scenario.SERVER,
                     Scenario.OFFLINE)
DEFAULT_SCENARIO = Scenario.OFFLINE
#: samples in one MultiStream query (mlperf.conf ``*.MultiStream.samples_per_query = 8``)
MULTISTREAM_SAMPLES_PER_QUERY = 8


class Mode(StrEnum):
    """A LoadGen test mode as mlharness names it (``TestMode``: PerformanceOnly, AccuracyOnly)."""

    PERFORMANCE = "performance"
    ACCURACY = "accuracy"


DEFAULT_MODE = Mode.PERFORMANCE


class Precision(StrEnum):
    """The numeric precision a backend runs a model in; never changed silently."""

    FP32 = "fp32"
    BF16 = "bf16"
    INT8 = "int8"


DEFAULT_PRECISION = Precision.FP32


#: accuracy metrics the official scripts print as a fraction, not a percentage, and the digits
#: shown: accuracy_kits.py's "Accuracy: mean = 0.86170", qwen3-vl's evaluation.py {"f1": 0.79};
#: their targets in the rules are fractions too
FRACTION_METRICS: dict[str, int] = {"DICE": 5, "F1_HIERARCHICAL": 3}


def accuracy_text(metric: str | None, value: float) -> str:
    """``acc 76.460%``, ``DICE 0.86170`` or ``F1_HIERARCHICAL 0.790``: an accuracy value as
    its script prints it."""
    if metric in FRACTION_METRICS:
        return f"{metric} {value:.{FRACTION_METRICS[metric]}f}"
    return f"{metric} {value:.3f}%"
