"""The official calibration lists (rules data under ``rules/calibration/``, source in SOURCE.md).

A list names samples either by file name (ImageNet, OpenImages) or by QSL index (SQuAD features:
``bert_calibration_features.txt`` indexes the features made with max_seq_len 384 and doc_stride
128, which is the harness's QSL order).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlharness.errors import ConfigError
from mlharness.rules.loader import calibration_sets, task_entries

DATA = Path(__file__).resolve().parent / "calibration"
ORIGIN = "mlcommons/inference "


@dataclass(frozen=True)
class CalibrationList:
    name: str  # option name, e.g. "option_1"
    file: str  # under rules/calibration/
    source: str  # the official path
    kind: str  # "file" (names) | "index" (QSL indices)

    def entries(self) -> list[str]:
        return [line.strip() for line in (DATA / self.file).read_text().splitlines()
                if line.strip()]


def _lists() -> dict[str, dict[str, CalibrationList]]:
    """benchmark -> its official lists, the first the default (``[tasks]`` and
    ``[calibration]`` in common.toml)."""
    sets = {name: {option: CalibrationList(option, e["file"], ORIGIN + e["source"], e["kind"])
                   for option, e in options.items()}
            for name, options in calibration_sets().items()}
    return {bench: sets[entry.calibration] for bench, entry in task_entries().items()
            if entry.calibration}


LISTS: dict[str, dict[str, CalibrationList]] = _lists()


def official_list(benchmark: str, option: str | None = None) -> CalibrationList:
    """The official list for ``benchmark`` (``option`` picks among several, e.g. ImageNet's)."""
    lists = LISTS.get(benchmark)
    if lists is None:
        raise ConfigError(f"benchmark {benchmark!r} has no official calibration list",
                          hint="give your own with --calibration-list FILE (one sample file name "
                               "or QSL index a line); the record marks it as not official")
    if option is None:
        return next(iter(lists.values()))
    if option not in lists:
        raise ConfigError(f"{benchmark} has no calibration list {option!r}",
                          hint="choose one of: " + ", ".join(lists))
    return lists[option]
