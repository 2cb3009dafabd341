"""TEST01 for SUTs that are not bit-exact: the accuracy of the sampled responses against the
accuracy run's responses for the same samples (``compliance/TEST01/README.md`` Part III).

The baseline is every accuracy-run entry whose ``qsl_idx`` the audit logged (what
``create_accuracy_baseline.sh`` selects); both sets are scored with the benchmark's own metric
and written to ``TEST01/accuracy/{baseline,compliance}_accuracy.txt``. The test passes when
``|1 - baseline / compliance| * 100`` is within 1% (0.1% for ``99.9`` benchmarks), as the
submission checker computes it (``compliance_check.py``, ``Config.get_delta_perc``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlharness.compliance.accuracy_check import load_accuracy_entries
from mlharness.rules.model import accuracy_delta_percent
from mlharness.tasks import Task


@dataclass
class AccuracyDelta:
    metric: str
    baseline: float
    compliance: float
    allowed_percent: float
    samples: int

    @property
    def delta_percent(self) -> float:
        if self.compliance == 0:
            return float("inf")
        return abs(1 - self.baseline / self.compliance) * 100

    @property
    def passed(self) -> bool:
        # the checker refuses a zero on either side before comparing
        return self.baseline != 0 and self.compliance != 0 and \
            self.delta_percent <= self.allowed_percent

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "metric": self.metric, "baseline": self.baseline,
                "compliance": self.compliance, "delta_percent": self.delta_percent,
                "allowed_percent": self.allowed_percent, "samples": self.samples}


def _pairs(entries: list[dict[str, Any]]) -> list[tuple[int, bytes]]:
    return [(int(e["qsl_idx"]), bytes.fromhex(e["data"])) for e in entries]


def accuracy_delta(task: Task, benchmark: str, reference_log: Path, test_log: Path,
                   accuracy_dir: Path) -> AccuracyDelta:
    """Score baseline and compliance sets with ``task.score``; write the two accuracy files."""
    ref = load_accuracy_entries(reference_log, "reference")
    test = load_accuracy_entries(test_log, "test")
    sampled = {e["qsl_idx"] for e in test}
    baseline_entries = [e for e in ref if e["qsl_idx"] in sampled]
    baseline = task.score(_pairs(baseline_entries))
    compliance = task.score(_pairs(test))
    accuracy_dir.mkdir(parents=True, exist_ok=True)
    (accuracy_dir / "baseline_accuracy.txt").write_text(baseline.text + "\n")
    (accuracy_dir / "compliance_accuracy.txt").write_text(compliance.text + "\n")
    return AccuracyDelta(baseline.metric, baseline.value, compliance.value,
                         accuracy_delta_percent(benchmark), len(sampled))
