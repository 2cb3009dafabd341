"""``torch.compile`` at load, for exactly the batch sizes a run issues, so no query pays for
compiling and no recompile mid-run looks like a stall.

torch.compile compiles a batch of one apart from every larger batch (it specialises sizes 0
and 1), and a graph with a dynamic batch axis serves every batch of two or more. Which of the
two a run needs follows from its scenario (:func:`batches_to_compile`); a run compiled only for
the dynamic axis gets its occasional batch of one (a query's tail) padded to two
(:func:`padded_to_two`). Compiling uses inductor with freezing: the weights become constants
that oneDNN pre-packs, and a PT2E int8 program's quantised patterns become int8 kernels.
"""

from __future__ import annotations

import shutil
import warnings
from typing import Any, Callable

import numpy as np

from mlharness.errors import ConfigError, ModelError, one_line

#: graphs compiled in this process so far: ``--instances N`` loads N models, and dynamo keeps
#: the graphs of all of them on the one ``forward`` code object
graphs_compiled = 0


def batches_to_compile(scenario: str | None, batch_size: int | None) -> list[int]:
    """The batch sizes to compile: 1 stands for itself, 2 or more for a dynamic batch axis.
    Batches of one are all SingleStream (and a run with --batch-size 1) issues, and what
    Server issues whenever queries do not pile up; Offline and MultiStream issue one only as a
    query's tail, padded to two, so they compile once (BERT-large: 2 minutes less at load)."""
    if scenario == "SingleStream" or batch_size == 1:
        return [1]
    dynamic = max(2, int(batch_size or 2))
    return [dynamic] if scenario in ("Offline", "MultiStream") else [dynamic, 1]


def require_compiler() -> None:
    """Inductor writes C++ and compiles it: without a compiler, say so in one line."""
    if not (shutil.which("c++") or shutil.which("g++")):
        raise ConfigError("compiling a model needs a C++ compiler, and none is on PATH",
                          hint="install g++ (Debian: apt install g++), or run the model "
                               "uncompiled (without compile=true or package=true)")


def compile_at_load(net: Any, every_axis_dynamic: bool, batches: list[int],
                    warm: Callable[[Any, int], Any]) -> Any:
    """``torch.compile(net)``, compiled now by ``warm(forward, batch)`` for each of ``batches``
    (``warm`` calls ``forward`` as it would call the model; for a batch of two or more,
    ``forward`` marks the batch axis dynamic); a failure to compile becomes one ModelError
    line."""
    import torch

    global graphs_compiled
    require_compiler()
    torch._inductor.config.freezing = True  # this process only runs inference
    # inductor's own advice to itself (how its oneDNN lowering copies a tensor)
    warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\._inductor\.")
    compiled = torch.compile(net, dynamic=True if every_axis_dynamic else None)
    # past dynamo's limits (8 graphs per code object, 256 in all) it would run the rest eager,
    # silently: the fifth of several Server instances would
    graphs_compiled += len(batches)
    dynamo = torch._dynamo.config
    dynamo.recompile_limit = max(dynamo.recompile_limit, 8 + graphs_compiled)
    dynamo.accumulated_recompile_limit = max(dynamo.accumulated_recompile_limit,
                                             256 + graphs_compiled)
    try:
        for batch in batches:
            warm(_marked(compiled) if batch > 1 else compiled, batch)
    except Exception as exc:  # inductor raises assorted types
        raise ModelError(f"torch.compile failed: {one_line(exc)}",
                         hint="drop --backend-option compile=true") from exc
    return compiled


def _marked(compiled: Any) -> Callable[..., Any]:
    """``compiled``, called with the batch axis of each tensor marked dynamic: compiled for any
    batch size, not the one it is called with."""
    import torch

    def call(*tensors: Any) -> Any:
        for tensor in tensors:
            torch._dynamo.mark_dynamic(tensor, 0)
        return compiled(*tensors)

    return call


def padded_to_two(run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
                  inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``run`` on a batch of one sent as two (the sample twice), the first answer kept."""
    doubled = {name: np.concatenate([x, x]) for name, x in inputs.items()}
    return {name: y[:1] for name, y in run(doubled).items()}
