"""The vector peak of this CPU, for the benchmarks' "of peak" column.

The fp32 peak is measured, not computed from a nominal clock (cores run above it, and AMD Zen 4
runs AVX-512 on 256-bit datapaths): the best of five 2048 x 2048 fp32 matrix products through
numpy's BLAS on every core. bf16 counts twice that where the CPU has AVX512_BF16 (two bf16
multiply-adds per fp32 lane), int8 four times where it has VNNI and twice on AVX2 without it
(pmaddubsw + pmaddwd: two instructions for what VNNI does in one); AMX is not modelled (its tiles
give roughly 8-16x the AVX-512 figure), so on AMX machines the column overstates the fraction.
"""

from __future__ import annotations

import functools
import time
from typing import Any


@functools.cache
def fp32_gemm_flops() -> float:
    """Measured fp32 multiply-adds x 2 per second of a large matrix product."""
    import numpy as np

    n = 2048
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    a @ a  # warm-up: threads started, caches filled
    best = 0.0
    for _ in range(5):
        t = time.perf_counter()
        a @ a
        best = max(best, 2 * n ** 3 / (time.perf_counter() - t))
    return best


def factor(isa: dict[str, Any], precision: str) -> int:
    """How many times the fp32 rate ``precision`` peaks at on this CPU's paths."""
    if precision == "bf16":
        return 2 if isa["bf16"] else 1
    if precision == "int8":
        return {None: 1, "avx2": 2}.get(isa["int8"], 4)  # AVX2: pmaddubsw + pmaddwd, no VNNI
    return 1


def peak_flops(isa: dict[str, Any], precision: str) -> float:
    """The peak for ``precision``: the measured fp32 rate x the ISA's factor."""
    return fp32_gemm_flops() * factor(isa, precision)


def describe(isa: dict[str, Any]) -> str:
    """One line on what the "of peak" column divides by."""
    return (f"of peak: against {fp32_gemm_flops() / 1e9:.0f} GFLOP/s, this machine's measured fp32 "
            f"GEMM rate (numpy, 2048^2), x2 for bf16 ({isa['bf16'] or 'no bf16 path'}), "
            f"x{factor(isa, 'int8')} for int8 "
            f"({isa['int8'] or 'no int8 path'}); AMX is not modelled")
