"""Read the two LoadGen logs the official verification scripts read, the way they read them.

* detail log: MLLOG events; a key's *first* value counts and an unreadable ``:::MLLOG`` line is an
  error (``tools/submission/log_parser.py`` MLPerfLog, strict mode); the error count is the
  ``num_errors`` event if present, else the events flagged ``is_error``.
* summary log: the ``Scenario``, score and ``Result is`` lines that
  ``compliance/TEST04/verify_performance.py`` matches.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.compliance.accuracy_check import VerificationInputError
from mlharness.loadgen.mllog import METRICS
from mlharness.names import Scenario

MLLOG = ":::MLLOG"

#: the score each scenario is judged by (``compliance/TEST01/verify_performance.py`` RESULT_FIELD;
#: the one table is ``loadgen.mllog.METRICS``)
DETAIL_SCORE_KEY = {scenario: metric.key for scenario, metric in METRICS.items()}


@dataclass
class DetailFacts:
    path: str
    values: dict[str, Any] = field(default_factory=dict)
    flagged_errors: int = 0

    def get(self, key: str) -> Any:
        return self.values.get(key)

    @property
    def num_errors(self) -> int:
        if "num_errors" in self.values:
            return int(self.values["num_errors"])
        return self.flagged_errors


def read_detail(path: Path) -> DetailFacts:
    """First value per key of an ``mlperf_log_detail.txt``."""
    if not path.is_file():
        raise VerificationInputError(f"detail log not found: {path}",
                                     hint="give a run directory with mlperf_log_detail.txt")
    facts = DetailFacts(str(path))
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    if not lines or not lines[0].startswith(MLLOG):
        raise VerificationInputError(f"{path} does not start with an MLLOG line",
                                     hint="give the mlperf_log_detail.txt LoadGen wrote")
    for n, line in enumerate(lines, start=1):
        if not line.startswith(MLLOG):
            continue
        try:
            event = json.loads(line[len(MLLOG):])
        except json.JSONDecodeError as exc:
            raise VerificationInputError(f"{path}:{n}: unreadable MLLOG line",
                                         hint="the log is damaged; re-run the test") from exc
        facts.values.setdefault(event.get("key"), event.get("value"))
        if (event.get("metadata") or {}).get("is_error"):
            facts.flagged_errors += 1
    return facts


@dataclass
class SummaryFacts:
    path: str
    scenario: str = ""
    score: float = 0.0  # throughput; for SingleStream/MultiStream 1e9 / latency estimate (ns)
    score_line: str = ""
    valid: bool | None = None
    errors: int = 0
    unreadable: str | None = None  # a score line the official script could not read either


_SUMMARY_SCORE = {
    # the official patterns, unescaped dots included
    "SingleStream": re.compile(r".*Early stopping (90th|90.0th|99.9th) percentile estimate"),
    "MultiStream": re.compile(r".*Early stopping (99th|99.0th) percentile estimate"),
    "Server": re.compile(r"Completed samples per second"),
    "Offline": re.compile(r"Samples per second"),
}


def _after_colon(line: str) -> str:
    return line.split(": ", 1)[1].strip()


def read_summary(path: Path) -> SummaryFacts:
    """Scenario, score, validity and error count of an ``mlperf_log_summary.txt``.

    The last matching score line wins; SingleStream/MultiStream latencies become ``1e9 / ns``.
    """
    if not path.is_file():
        raise VerificationInputError(f"summary log not found: {path}",
                                     hint="give a run directory with mlperf_log_summary.txt")
    facts = SummaryFacts(str(path))
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True):
        if line.startswith("Scenario"):
            facts.scenario = _after_colon(line)
            continue
        pattern = _SUMMARY_SCORE.get(facts.scenario)
        if pattern is not None and pattern.match(line):
            facts.score_line = line.strip()
            try:
                value = float(_after_colon(line))
                facts.score = (1e9 / value if Scenario(facts.scenario).latency_metric
                               else value)
            except (ValueError, IndexError, ZeroDivisionError):
                facts.unreadable = facts.score_line
            continue
        if line.startswith("Result is"):
            facts.valid = _after_colon(line) != "INVALID"
        elif re.match(r"\d+ ERROR", line):
            facts.errors += int(line.split(" ", 1)[0])
    return facts
