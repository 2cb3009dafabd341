"""The official calibration lists (rules data under ``rules/calibration/``, source in SOURCE.md).

A list names samples either by file name (ImageNet, OpenImages) or by QSL index (SQuAD features:
``bert_calibration_features.txt`` indexes the features made with max_seq_len 384 and doc_stride
128, which is the harness's QSL order).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlharness.errors import ConfigError

DATA = Path(__file__).resolve().parent / "calibration"
ORIGIN = "mlcommons/inference calibration/"


@dataclass(frozen=True)
class CalibrationList:
    name: str  # option name, e.g. "option_1"
    file: str  # under rules/calibration/
    source: str  # the official path
    kind: str  # "file" (names) | "index" (QSL indices)

    def entries(self) -> list[str]:
        return [line.strip() for line in (DATA / self.file).read_text().splitlines()
                if line.strip()]


_IMAGENET = {
    "option_1": CalibrationList("option_1", "ImageNet_cal_image_list_option_1.txt",
                                ORIGIN + "ImageNet/cal_image_list_option_1.txt", "file"),
    "option_2": CalibrationList("option_2", "ImageNet_cal_image_list_option_2.txt",
                                ORIGIN + "ImageNet/cal_image_list_option_2.txt", "file"),
}
_SQUAD = {"features": CalibrationList("features", "SQuAD-v1.1_bert_calibration_features.txt",
                                      ORIGIN + "SQuAD-v1.1/bert_calibration_features.txt",
                                      "index")}
_OPENIMAGES = {"images": CalibrationList("images", "openimages_cal_images_list.txt",
                                         ORIGIN + "openimages/openimages_cal_images_list.txt",
                                         "file")}

#: benchmark -> its official lists; the first is the default
LISTS: dict[str, dict[str, CalibrationList]] = {
    "resnet50": _IMAGENET, "retinanet": _OPENIMAGES, "bert-99": _SQUAD, "bert-99.9": _SQUAD,
}


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
