"""The 3D-UNet response and its score, as ``accuracy_kits.py`` reads and scores it.

A response is the uint8 label of every voxel of the pre-processed volume, in C order (the
reference's ``(1, 1, D, H, W)`` argmax). DICE is taken per case for the kidney (label 1) and the
tumour (label 2) apart, each class against all others, with 1e-6 added above and below; a case's
composite is the mean of its two; the run's figures are the means over the cases in the
dataset's order (the ``mean`` row of the reference's ``summary.csv``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the smoothing accuracy_kits.py get_dice_score adds to numerator and denominator
SMOOTH = 1e-6
KIDNEY, TUMOUR = 1, 2


@dataclass(frozen=True)
class CaseDice:
    """One case's DICE: kidney, tumour and their mean."""

    case: str
    kidney: float
    tumour: float

    @property
    def composite(self) -> float:
        return float(np.mean(np.array([self.kidney, self.tumour], np.float64)))


def class_dice(prediction: np.ndarray, target: np.ndarray, label: int) -> float:
    """DICE of one class: voxel counts are exact in float64, as the reference's one-hot sums."""
    predicted = prediction == label
    expected = target == label
    both = float(np.count_nonzero(predicted & expected))
    return (2.0 * both + SMOOTH) / (float(np.count_nonzero(expected))
                                    + float(np.count_nonzero(predicted)) + SMOOTH)


def case_dice(case: str, prediction: np.ndarray, target: np.ndarray) -> CaseDice:
    """A case's DICE from its predicted and true labels (same shape)."""
    if prediction.shape != target.shape:
        raise ValueError(f"{case}: prediction {prediction.shape} and label {target.shape} differ")
    return CaseDice(case, class_dice(prediction, target, KIDNEY),
                    class_dice(prediction, target, TUMOUR))


def decode(data: bytes, shape: tuple[int, ...]) -> np.ndarray:
    """A response's labels as a volume of ``shape``; a wrong length raises ValueError."""
    return np.frombuffer(data, np.uint8).reshape(shape)


@dataclass(frozen=True)
class DiceSummary:
    """The means over the cases, as accuracy_kits.py's ``summary.csv`` ``mean`` row."""

    cases: tuple[CaseDice, ...]

    def _mean(self, values: list[float]) -> float:
        # pandas' mean: the sum of the column (numpy's pairwise sum) over the count
        return float(np.sum(np.array(values, np.float64)) / len(values)) if values else 0.0

    @property
    def kidney(self) -> float:
        return self._mean([c.kidney for c in self.cases])

    @property
    def tumour(self) -> float:
        return self._mean([c.tumour for c in self.cases])

    @property
    def mean(self) -> float:
        return self._mean([c.composite for c in self.cases])

    def line(self) -> str:
        """The line accuracy_kits.py prints (the checker reads ``mean`` from it)."""
        return (f"Accuracy: mean = {self.mean:.5f}, kidney = {self.kidney:.4f}, "
                f"tumor = {self.tumour:.4f}")
