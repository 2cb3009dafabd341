"""KiTS19 pre-processing as the reference does it (``preprocess.py`` ``Preprocessor``): resample
to one voxel spacing, clip and normalise the intensities, pad every axis to at least the ROI,
then crop or pad it to a multiple of the sliding window's stride.

The result of a case is ``(image, label)``: float32 and uint8 arrays of shape ``(1, D, H, W)``,
equal voxel for voxel to the reference's pickle (tests/test_kits19_reference.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import DatasetError, one_line

#: bump when the output of :func:`preprocess_case` changes: the cache key holds it
VERSION = 1


@dataclass(frozen=True)
class Geometry:
    """The constants of ``global_vars.py`` (3d-unet-kits19)."""

    mean: float = 101.0
    std: float = 76.9
    clip_min: float = -79.0
    clip_max: float = 304.0
    padding: float = -2.2
    spacing: tuple[float, float, float] = (1.6, 1.2, 1.2)
    roi: tuple[int, int, int] = (128, 128, 128)
    overlap: float = 0.5

    @property
    def strides(self) -> tuple[int, ...]:
        return tuple(int(r * (1 - self.overlap)) for r in self.roi)

    def to_dict(self) -> dict[str, object]:
        return {"version": VERSION, **asdict(self)}


KITS19 = Geometry()


def load_resampled(imaging: Path, segmentation: Path,
                   geometry: Geometry = KITS19) -> tuple[np.ndarray, np.ndarray]:
    """The case's volumes at the target spacing (float32 image, uint8 label, 3-D)."""
    import nibabel  # lazy: the 3d-unet extra, only when a case is pre-processed
    from scipy.ndimage import zoom  # lazy: the same

    try:
        image_file: Any = nibabel.load(imaging)  # a Nifti1Image (get_fdata, header)
        label_file: Any = nibabel.load(segmentation)
        # pixdim as Python floats: a float32 1.6 is not 1.6, so nearly every case is resampled,
        # as in the reference
        spacing = image_file.header["pixdim"][1:4].tolist()
        image = image_file.get_fdata().astype(np.float32)
        label = label_file.get_fdata().astype(np.uint8)
    except (OSError, ValueError, EOFError, nibabel.filebasedimages.ImageFileError) as exc:
        raise DatasetError(f"{imaging.parent}: cannot read the case ({one_line(exc)})",
                           hint="re-download the case: its NIfTI files are damaged") from None
    if image.shape != label.shape:
        raise DatasetError(f"{imaging.parent}: imaging {image.shape} and segmentation "
                           f"{label.shape} differ in shape",
                           hint="re-download the case: its two files do not belong together")
    if spacing != list(geometry.spacing):
        factor = np.array(spacing) / np.array(geometry.spacing)
        image = zoom(image, factor, order=1, mode="constant", cval=image.min(), grid_mode=False)
        label = zoom(label, factor, order=0, mode="constant", cval=label.min(), grid_mode=False)
    return image, label


def normalise(image: np.ndarray, geometry: Geometry = KITS19) -> np.ndarray:
    """Clip to the CT window, then subtract the mean and divide by the deviation."""
    clipped = np.clip(image, geometry.clip_min, geometry.clip_max)
    return (clipped - geometry.mean) / geometry.std


def _split(total: int) -> tuple[int, int]:
    """``total`` voxels of padding or cropping as (before, after): the smaller half first."""
    return total // 2, total - total // 2


def pad_to_roi(image: np.ndarray, label: np.ndarray,
               geometry: Geometry = KITS19) -> tuple[np.ndarray, np.ndarray]:
    """Repeat the edge voxels so every spatial axis is at least the ROI."""
    widths = [(0, 0)] + [_split(max(0, r - s)) for r, s in zip(geometry.roi, image.shape[1:])]
    return np.pad(image, widths, mode="edge"), np.pad(label, widths, mode="edge")


def fit_to_stride(image: np.ndarray, label: np.ndarray,
                  geometry: Geometry = KITS19) -> tuple[np.ndarray, np.ndarray]:
    """Crop an axis whose remainder by the stride is under half a stride, then pad with the
    padding value (0 in the label) to a multiple of the stride that holds at least the ROI."""
    crops = []
    for stride, size in zip(geometry.strides, image.shape[1:]):
        rest = size % stride
        before, after = _split(rest if rest < stride // 2 else 0)
        crops.append(slice(before, size - after))
    box: tuple[Any, ...] = (Ellipsis, *crops)
    image, label = image[box], label[box]
    widths = [(0, 0)]
    for roi, stride, size in zip(geometry.roi, geometry.strides, image.shape[1:]):
        grow = (stride - size % stride) % stride
        widths.append(_split(grow if size + grow >= roi else grow + stride))
    return (np.pad(image, widths, mode="constant", constant_values=[geometry.padding]),
            np.pad(label, widths, mode="constant", constant_values=[0]))


def preprocess_case(imaging: Path, segmentation: Path,
                    geometry: Geometry = KITS19) -> tuple[np.ndarray, np.ndarray]:
    """One case from its raw files to ``(image float32, label uint8)``, each ``(1, D, H, W)``."""
    image, label = load_resampled(imaging, segmentation, geometry)
    image = normalise(image[np.newaxis], geometry)
    image, label = pad_to_roi(image, label[np.newaxis], geometry)
    image, label = fit_to_stride(image, label, geometry)
    return image.astype(np.float32), label.astype(np.uint8)
