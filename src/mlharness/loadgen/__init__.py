"""The only package that imports ``mlperf_loadgen``: settings, QSL/SUT wiring, log parsing."""

from mlharness.loadgen.mllog import LoadGenResult, parse_detail_log, parse_run_logs, read_accuracy_log
from mlharness.loadgen.settings import SCENARIOS, TestConfig, render_user_conf

__all__ = [
    "LoadGenResult", "SCENARIOS", "TestConfig", "parse_detail_log", "parse_run_logs",
    "read_accuracy_log", "render_user_conf",
]
