"""Synthetic KiTS19 cases in the raw layout and random-weight 3D-UNets of the official signature.

Nothing is downloaded. :func:`make_kits19` writes ``case_XXXXX/imaging.nii.gz`` (int16 CT
values) and ``segmentation.nii.gz`` (uint8: 0 background, 1 kidney, 2 tumour) with KiTS19-like
affines (axes permuted and flipped, slices first) and spacings that make the resampling, the
edge padding, the cropping and the stride padding of the pre-processing all happen.
:func:`unet3d_onnx` builds the official model's graph (``pytorch_checkpoint_SUT.py`` ``Unet3D``:
conv + instance norm + ReLU blocks, strided down, transposed-conv up with skips) at any width:
input ``input`` float32 ``[1|batch_size, 1, 128, 128, 128]``, output ``output`` float32
``[.., 3, 128, 128, 128]``, opset 12 as ``unet_pytorch_to_onnx.py`` exports it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from mlharness.tasks.kits19.cases import INFERENCE_CASES

#: (raw shape (slices, rows, columns), spacing (mm) of those axes): resampled to 1.6/1.2/1.2 mm
#: (edge padding up to 128, cropping to a multiple of 64, padding to one) and 1 to 4 windows
SHAPES = [((40, 90, 100), (3.0, 2.0, 1.8)),
          ((50, 120, 110), (4.0, 1.9, 2.1)),
          ((90, 70, 96), (2.5, 2.6, 2.0)),
          ((33, 60, 64), (5.0, 2.4, 2.5)),
          ((60, 100, 80), (3.6, 2.0, 1.5)),
          ((26, 64, 64), (5.0, 2.4, 2.4))]      # the duplicate's source (case_00185)


def kits_affine(spacing: tuple[float, float, float]) -> np.ndarray:
    """A KiTS19-style affine: array axis 0 (slices) runs along -z, axis 1 along -y, axis 2
    along -x (one non-zero per row, as the reference's reshaped affine needs)."""
    sz, sy, sx = spacing
    return np.array([[0, 0, -sx, 10.0], [0, -sy, 0, -20.0], [-sz, 0, 0, 5.0], [0, 0, 0, 1]])


def _ellipsoid(shape: tuple[int, ...], centre: np.ndarray, radii: np.ndarray) -> np.ndarray:
    grid = np.indices(shape, dtype=np.float32)
    dist = sum(((grid[a] - centre[a]) / radii[a]) ** 2 for a in range(3))
    return dist <= 1.0


def make_case(folder: Path, shape: tuple[int, int, int], spacing: tuple[float, float, float],
              seed: int) -> None:
    """One case: a body, two kidneys (label 1), a tumour in one (label 2), CT-like noise."""
    import nibabel

    rng = np.random.default_rng(seed)
    dims = np.array(shape, np.float32)
    body = _ellipsoid(shape, dims / 2, dims * [0.6, 0.45, 0.45])
    label = np.zeros(shape, np.uint8)
    for side in (0.3, 0.7):
        centre = dims * [rng.uniform(0.4, 0.6), rng.uniform(0.45, 0.6), side]
        label[_ellipsoid(shape, centre, dims * [0.25, 0.12, 0.1])] = 1
    centre = dims * [0.5, 0.55, 0.3]
    label[_ellipsoid(shape, centre, dims * [0.1, 0.06, 0.05]) & (label == 1)] = 2
    image = np.full(shape, -1024.0)
    image[body] = 40.0
    image[label == 1] = 180.0
    image[label == 2] = 90.0
    image += rng.normal(0, 25, shape)
    folder.mkdir(parents=True, exist_ok=True)
    affine = kits_affine(spacing)
    nibabel.save(nibabel.Nifti1Image(np.round(image).astype(np.int16), affine),
                 folder / "imaging.nii.gz")
    nibabel.save(nibabel.Nifti1Image(label, affine), folder / "segmentation.nii.gz")


def make_kits19(root: Path, duplicate: bool = True) -> Path:
    """A KiTS19 ``data`` folder holding the 43 inference cases: the distinct :data:`SHAPES`
    cases, the others links to them (folders of links, as a user's copy might be), and
    ``case_00185`` its own case; ``case_00400`` a copy of it when ``duplicate`` (the reference's
    Makefile makes one; mlharness reads case_00185 where it is missing)."""
    root = root.absolute()
    root.mkdir(parents=True, exist_ok=True)
    distinct = [c for c in INFERENCE_CASES if c not in ("case_00185", "case_00400")]
    for n, (shape, spacing) in enumerate(SHAPES[:-1]):
        make_case(root / distinct[n], shape, spacing, seed=n)
    shape, spacing = SHAPES[-1]
    make_case(root / "case_00185", shape, spacing, seed=99)
    one_window = [distinct[0], distinct[3]]  # the links: cases of one window each (fast)
    for n, case in enumerate(distinct[len(SHAPES) - 1:]):
        source = root / one_window[n % 2]
        (root / case).mkdir()
        for name in ("imaging.nii.gz", "segmentation.nii.gz"):
            os.symlink(source / name, root / case / name)
    if duplicate:
        (root / "case_00400").mkdir()
        for name in ("imaging.nii.gz", "segmentation.nii.gz"):
            (root / "case_00400" / name).write_bytes((root / "case_00185" / name).read_bytes())
    return root


def unet3d_onnx(path: Path, filters: tuple[int, ...] = (2, 4), batch: int | None = 1,
                seed: int = 0, roi: int = 128) -> Path:
    """The official 3D-UNet graph with ``filters`` per level (the official: 32, 64, 128, 256,
    320) and random weights; ``batch`` None makes the dynamic-batch model."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    count = [0]

    def fresh(op: str) -> str:
        count[0] += 1
        return f"{op}_{count[0]}"

    def weight(*shape: int, std: float) -> str:
        name = fresh("w")
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * std).astype(np.float32), name))
        return name

    def node(op: str, inputs: list[str], **attrs: object) -> str:
        out = fresh(op.lower())
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv_block(x: str, c_in: int, c_out: int, stride: int = 1) -> str:
        w = weight(c_out, c_in, 3, 3, 3, std=np.sqrt(2.0 / (c_in * 27)))
        y = node("Conv", [x, w], kernel_shape=[3, 3, 3], pads=[1] * 6, strides=[stride] * 3)
        scale = weight(c_out, std=0.1)
        inits[-1] = numpy_helper.from_array(1 + numpy_helper.to_array(inits[-1]), scale)
        y = node("InstanceNormalization", [y, scale, weight(c_out, std=0.1)], epsilon=1e-5)
        return node("Relu", [y])

    def double(x: str, c_in: int, c_out: int, stride: int = 1) -> str:
        return conv_block(conv_block(x, c_in, c_out, stride), c_out, c_out)

    x = double("input", 1, filters[0])
    skips = [x]
    for c_in, c_out in zip(filters[:-1], filters[1:]):
        x = double(x, c_in, c_out, stride=2)
        skips.append(x)
    x = double(x, filters[-1], filters[-1], stride=2)  # the bottleneck
    ups = [(filters[-1], filters[-1])] + list(zip(reversed(filters[1:]), reversed(filters[:-1])))
    for (c_in, c_out), skip in zip(ups, reversed(skips)):
        w = weight(c_in, c_out, 2, 2, 2, std=np.sqrt(1.0 / (c_in * 8)))
        x = node("ConvTranspose", [x, w, weight(c_out, std=0.05)], kernel_shape=[2, 2, 2],
                 strides=[2, 2, 2])
        x = node("Concat", [x, skip], axis=1)
        x = double(x, 2 * c_out, c_out)
    w = weight(3, filters[0], 1, 1, 1, std=np.sqrt(1.0 / filters[0]))
    nodes.append(helper.make_node("Conv", [x, w, weight(3, std=0.1)], ["output"], name="output",
                                  kernel_shape=[1, 1, 1]))
    dim: int | str = batch if batch is not None else "batch_size"
    graph = helper.make_graph(
        nodes, "unet3d",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [dim, 1, roi, roi, roi])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [dim, 3, roi, roi, roi])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return path
