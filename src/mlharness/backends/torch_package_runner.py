"""A compiled package's model, run with its weights in 64-byte-aligned memory.

AOTInductor's runtime copies a package's weights into one ``malloc`` block, at offsets that
are multiples of 64 from its start; glibc hands out a block that large 16 bytes past a 64-byte
line, so every weight sits 16 bytes off one. oneDNN's matmul, reading fp32 weights it packed
ahead from there, took 1.4-1.6x as long as the same kernel in ``torch.compile`` (BERT on an
AVX2 EPYC; bit-equal logits). So after loading, each weight is copied into torch's own memory
(aligned to 64 bytes) and the runtime reads the copies in place (``user_managed``).

The runtime names a weight by its own name (``bert_encoder_layer_0_..._bias``), but hands its
weights out by the module's name (``bert.encoder.layer.0....bias``); the copies go back under
the runtime's names. When every weight has a module name of its own (fp32 checkpoints), the
copies are handed in as the runtime's second set of weights, that set is made the active one
and the runtime's block is freed: the weights are held once. A PT2E int8 program gives several
quantisation parameters one module name (twelve ``x_zp`` scalars, pairs of per-channel zero
points), so those cannot be read one by one: the rest is copied and read in place, and the
runtime's block stays for them (the weights are then held twice; int8 ones are a quarter of
fp32's).
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

#: torch allocates CPU tensors on this boundary (c10's alignment)
ALIGNMENT = 64


class PackageRunner:
    """``runner(*tensors)`` runs the package's model; ``runners`` calls may run at once.
    ``not_moved``: the module names of the weights left where the runtime put them."""

    def __init__(self, path: Path, runners: int) -> None:
        import torch
        from torch.utils import _pytree as pytree

        runner = self._runner = _open(Path(path), max(1, runners))
        self._out_spec = pytree.treespec_loads(runner.get_call_spec()[1])
        # the copies must outlive the runner's use of them: kept here
        self._weights, self.not_moved = _aligned_copies(runner)
        if self.not_moved:
            runner.update_constant_buffer(self._weights, False, False, True)  # in place
        else:  # all of them: the runtime's block can go
            runner.update_constant_buffer(self._weights, True, True, True)  # inactive, complete
            runner.swap_constant_buffer()
            runner.free_inactive_constant_buffer()
        self.aligned = not self.not_moved and all(
            t.data_ptr() % ALIGNMENT == 0 for t in runner.extract_constants_map(False).values()
            if t.layout == torch.strided)  # oneDNN's own: opaque, no pointer

    def __call__(self, *tensors: Any) -> Any:
        from torch.utils import _pytree as pytree

        return pytree.tree_unflatten(self._runner.run(list(tensors)), self._out_spec)


def _aligned_copies(runner: Any) -> tuple[dict[str, Any], list[str]]:
    """A copy of each weight the runtime holds (torch's memory: 64-byte aligned) by the
    runtime's name for it, and the module names shared by several weights (not copied)."""
    constants = runner.extract_constants_map(False)  # by module name (folded: left out)
    names = {name: fqn for name, fqn in runner.get_constant_names_to_original_fqns().items()
             if fqn in constants}
    counts = Counter(names.values())
    copies = {name: constants[fqn].clone() for name, fqn in names.items() if counts[fqn] == 1}
    return copies, sorted(fqn for fqn, n in counts.items() if n > 1)


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
