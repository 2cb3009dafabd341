"""The KiTS19 cases a 3D-UNet run reads, and where their files are in the raw layout.

The official download (github.com/neheller/kits19, ``python -m starter_code.get_imaging``) gives
``data/case_XXXXX/imaging.nii.gz`` and ``segmentation.nii.gz``; the reference's Makefile
(``duplicate_kits19_case_00185``) then copies ``case_00185`` to ``case_00400``, the 43rd
inference case. A folder without that copy is read as if it had it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlharness.errors import DatasetError

#: vision/medical_imaging/3d-unet-kits19/meta/inference_cases.json, in its order (the QSL's)
INFERENCE_CASES: tuple[str, ...] = tuple(f"case_{n:05d}" for n in (
    0, 3, 5, 6, 12, 24, 34, 41, 44, 49, 52, 56, 61, 65, 66, 70, 76, 78, 80, 84, 86, 87, 92, 111,
    112, 125, 128, 138, 157, 160, 161, 162, 169, 171, 176, 185, 187, 189, 198, 203, 206, 207, 400))

#: the reference Makefile's duplicate: case -> the case it copies
DUPLICATES: dict[str, str] = {"case_00400": "case_00185"}

IMAGING = "imaging.nii.gz"
SEGMENTATION = "segmentation.nii.gz"


@dataclass(frozen=True)
class CaseFiles:
    """One case: its name and the two NIfTI files it is read from."""

    name: str
    imaging: Path
    segmentation: Path


def data_folder(dataset_dir: Path) -> Path:
    """The folder holding the ``case_*`` folders: ``dataset_dir`` itself, or its ``data/`` (a
    clone of the kits19 repository)."""
    root = Path(dataset_dir).expanduser().absolute()
    if not root.is_dir():
        raise DatasetError(f"KiTS19 folder not found: {root}",
                           hint="pass -d the folder holding case_00000/imaging.nii.gz, ... "
                                "(kits19/data of the official download)")
    if not _has_cases(root) and _has_cases(root / "data"):
        return root / "data"
    return root


def _has_cases(folder: Path) -> bool:
    return folder.is_dir() and any(folder.glob(f"case_*/{IMAGING}"))


def case_files(dataset_dir: Path, names: tuple[str, ...] = INFERENCE_CASES) -> list[CaseFiles]:
    """Each case of ``names`` with its files, in order; a missing case is one error naming it."""
    root = data_folder(dataset_dir)
    found: list[CaseFiles] = []
    missing: list[str] = []
    for name in names:
        folder = root / name
        if not (folder / IMAGING).is_file() and name in DUPLICATES:
            folder = root / DUPLICATES[name]
        files = CaseFiles(name, folder / IMAGING, folder / SEGMENTATION)
        if files.imaging.is_file() and files.segmentation.is_file():
            found.append(files)
        else:
            missing.append(name)
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise DatasetError(
            f"{root}: {len(missing)} KiTS19 case(s) missing or incomplete: "
            f"{', '.join(missing[:3])}{more} (each needs {IMAGING} and {SEGMENTATION})",
            hint="download KiTS19 with github.com/neheller/kits19 (python -m "
                 "starter_code.get_imaging) and pass -d its data/ folder")
    return found
