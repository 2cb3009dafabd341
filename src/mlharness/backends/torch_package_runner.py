"""A compiled package's model, run with its weights in 64-byte-aligned memory.

AOTInductor's runtime copies a package's weights into one ``malloc`` block, at offsets that
are multiples of 64 from its start; glibc hands out a block that large 16 bytes past a 64-byte
line, so every weight sits 16 bytes off one. oneDNN's matmul, reading fp32 weights it packed
ahead from there, took 1.4-1.6x as long as the same kernel in ``torch.compile`` (BERT on an
AVX2 EPYC; bit-equal logits). So after loading, each weight is copied into torch's own memory
(aligned to 64 bytes) and the runtime is told to read those copies instead (``user_managed``):
the package then runs as fast as ``torch.compile``, or faster. The runtime keeps its own block
(handing the copies in as its inactive buffer, then swapping and freeing, crashed the next run
here), so a loaded package holds its weights twice.
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

#: torch allocates CPU tensors on this boundary (c10's alignment)
ALIGNMENT = 64


class PackageRunner:
    """``runner(*tensors)`` runs the package's model; ``runners`` calls may run at once."""

    def __init__(self, path: Path, runners: int) -> None:
        import torch
        from torch.utils import _pytree as pytree

        self._runner = _open(Path(path), max(1, runners))
        self._out_spec = pytree.treespec_loads(self._runner.get_call_spec()[1])
        constants = self._runner.extract_constants_map(False)
        # the copies must outlive the runner's use of them: kept here
        self._weights = {name: t.clone() for name, t in constants.items()}
        del constants
        self._runner.update_constant_buffer(self._weights, False, False, True)
        self.aligned = all(t.data_ptr() % ALIGNMENT == 0 for t in self._weights.values()
                           if t.layout == torch.strided)  # oneDNN's own: opaque, no pointer

    def __call__(self, *tensors: Any) -> Any:
        from torch.utils import _pytree as pytree

        return pytree.tree_unflatten(self._runner.run(list(tensors)), self._out_spec)


def libraries(archive: zipfile.ZipFile) -> list[str]:
    """The compiled libraries (the model's code and weights) a package holds, by member name."""
    return [n for n in archive.namelist() if n.endswith(".wrapper.so")]


def _open(path: Path, runners: int) -> Any:
    """The runtime of the package's library (its weights inside); the library is read from a
    temporary copy, which is gone once loaded."""
    import torch

    with zipfile.ZipFile(path) as archive:
        names = libraries(archive)
        if len(names) != 1:
            raise ValueError(f"{path} holds {len(names)} compiled libraries, not one")
        folder = tempfile.mkdtemp(prefix="mlharness-package-")
        try:
            library = archive.extract(names[0], folder)
            return torch._C._aoti.AOTIModelContainerRunnerCpu(library, runners)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
