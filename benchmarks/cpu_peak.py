"""The matrix peak of this CPU, for the benchmarks' "of peak" column.

The fp32 peak is measured, not computed from a nominal clock (cores run above it, and AMD Zen 4
runs AVX-512 on 256-bit datapaths): the best of five 2048 x 2048 fp32 matrix products through
numpy's BLAS on every core. bf16 counts twice that where the CPU has AVX512_BF16 (two bf16
multiply-adds per fp32 lane), int8 four times where it has VNNI and twice on AVX2 without it
(pmaddubsw + pmaddwd: two instructions for what VNNI does in one).

AMX tiles do far more than these factors say, so where the CPU has AMX the bf16 and int8 peaks
are measured too, the same way: 2048 x 2048 products in bf16 through torch (oneDNN) and in
u8 x s8 -> s32 through onnxruntime's MatMulInteger (MLAS), and each peak is the higher of the
measured rate and the factor's. Without torch, bf16 is left to the factor.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable

N = 2048  # the matrices' side: large enough to run at the GEMM's full rate


#: each rate is the best product of at least this long a spell: on a shared VM (Xeon with AMX,
#: 2 vCPUs) the rate rose for seconds after an idle spell: 0.3 s probes gave 187 GFLOP/s fp32,
#: and four 3 s spells in a row in one process 257, 270, 279 and 297
MIN_SECONDS = 10.0


def _best_rate(product: Callable[[], Any]) -> float:
    """Multiply-adds x 2 per second of the best of at least five runs of an N x N x N
    ``product``, repeated for MIN_SECONDS."""
    product()  # warm-up: threads started, caches filled, kernels chosen
    best, runs, start = 0.0, 0, time.perf_counter()
    while runs < 5 or time.perf_counter() - start < MIN_SECONDS:
        t = time.perf_counter()
        product()
        best = max(best, 2 * N ** 3 / (time.perf_counter() - t))
        runs += 1
    return best


@functools.cache
def fp32_gemm_flops() -> float:
    """Measured fp32 multiply-adds x 2 per second of a large matrix product (numpy)."""
    import numpy as np

    a = np.random.default_rng(0).random((N, N), dtype=np.float32)
    return _best_rate(lambda: a @ a)


@functools.cache
def bf16_gemm_flops() -> float | None:
    """Measured bf16 rate of torch's matrix product (oneDNN: AMX where there is AMX), or None
    without torch."""
    try:
        import torch
    except ImportError:
        return None
    a = torch.rand(N, N, dtype=torch.bfloat16)
    with torch.no_grad():
        return _best_rate(lambda: torch.mm(a, a))


@functools.cache
def int8_gemm_ops() -> float:
    """Measured int8 rate of onnxruntime's MatMulInteger (u8 x s8 -> s32, MLAS: AMX where
    there is AMX)."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.integers(-128, 128, (N, N), dtype=np.int8), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "int8_gemm",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [N, N])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [N, N])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {"a": rng.integers(0, 256, (N, N), dtype=np.uint8)}
    return _best_rate(lambda: session.run(None, feed))


def factor(isa: dict[str, Any], precision: str) -> int:
    """How many times the fp32 rate ``precision`` peaks at on this CPU's vector paths."""
    if precision == "bf16":
        return 2 if isa["bf16"] else 1
    if precision == "int8":
        return {None: 1, "avx2": 2}.get(isa["int8"], 4)  # AVX2: pmaddubsw + pmaddwd, no VNNI
    return 1


def measured(isa: dict[str, Any], precision: str) -> float | None:
    """The measured rate of ``precision`` where the CPU's path for it is AMX, else None."""
    if isa.get(precision) != "amx":
        return None
    return {"bf16": bf16_gemm_flops, "int8": int8_gemm_ops}[precision]()


def modelled(isa: dict[str, Any], precision: str) -> float:
    """The peak the vector model gives ``precision``: the measured fp32 rate x the factor."""
    return fp32_gemm_flops() * factor(isa, precision)


def peak_flops(isa: dict[str, Any], precision: str) -> float:
    """The peak for ``precision``: the model's, or on AMX the measured rate of that precision
    where it is higher."""
    return max(modelled(isa, precision), measured(isa, precision) or 0.0)


def describe(isa: dict[str, Any]) -> str:
    """One line on what the "of peak" column divides by."""
    parts = [f"of peak: against {fp32_gemm_flops() / 1e9:.0f} GFLOP/s, this machine's measured "
             f"fp32 GEMM rate (numpy, {N}^2)"]
    for precision, runtime in (("bf16", "torch bf16"), ("int8", "onnxruntime MatMulInteger")):
        path, peak = isa[precision], peak_flops(isa, precision)
        if peak > modelled(isa, precision):  # the measured rate won
            parts.append(f"{precision}: {peak / 1e9:.0f} G/s measured on {path} ({runtime})")
        else:
            parts.append(f"x{factor(isa, precision)} for {precision} ({path or 'no path'})")
    return ", ".join(parts)
