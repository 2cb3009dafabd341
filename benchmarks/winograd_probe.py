"""Does a Winograd rewrite of ResNet-50's 3x3 convolutions make fp32 faster here? Measured.

vision_cpu.py's fp32 goal (1.5x the reference) is out of reach by GEMM speed alone: the
reference already runs at 62-87 % of this CPU's fp32 GEMM rate. The one known way to do fewer
fp32 multiplications is Winograd's minimal filtering (Lavin & Gray, "Fast Algorithms for
Convolutional Neural Networks", arXiv:1509.09308, whose matrices are used here): F(2x2,3x3)
needs 2.25x fewer, F(4x4,3x3) 4x fewer, on the 3x3 stride-1 convolutions only. No runtime
here ships it for x86 (oneDNN 3 dropped its AVX-512 Winograd), so this script writes it as a
plain ONNX graph, the only form every runtime reads:

  input transform  B^T d B   a grouped convolution (kernel m+2, stride m, (m+2)^2 outputs a channel)
  products         U . V     one batched MatMul in the Winograd domain ((m+2)^2 GEMMs)
  output transform A^T M A   a grouped 1x1 convolution (bias included) and DepthToSpace

Each of ResNet-50 v1.5's stride-1 3x3 shapes (Conv + bias + Relu, batch as vision_cpu.py's)
runs in its direct form and in both rewrites, and each rewrite's batched MatMul alone (what a
fused kernel whose transforms cost nothing would run), in rounds taken in turn, best time
each. The rewrites' outputs must agree with the direct form. The end: the whole-model gain the
rewrite gives (each layer in its faster form; the rest of the model unchanged), the gain with
transforms costing nothing, and the gain by multiplication count:

  RATIO winograd/direct ResNet-50 fp32 (RUNTIME) = X.XX (...)

Usage: python benchmarks/winograd_probe.py [--batch 32] [--rounds 8]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).parent))
from resnet50_graph import MACS, STAGES  # noqa: E402
from runtimes import installed  # noqa: E402

#: the largest output difference accepted, relative to the output's largest value
TOLERANCE = 1e-4

# (B^T, G, A^T) of F(m x m, 3 x 3) as Lavin & Gray (arXiv:1509.09308) give them
MATRICES = {
    2: ([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]]),
    4: ([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
         [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
        [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
         [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]),
}


def stride1_shapes() -> list[tuple[int, int, int]]:
    """(channels, height = width, how many) of ResNet-50 v1.5's stride-1 3x3 convolutions: all
    of the first stage's blocks, the later stages' all but the first (its 3x3 has stride 2)."""
    size, shapes = 56, []
    for i, (width, blocks, stride) in enumerate(STAGES):
        size //= stride
        shapes.append((width, size, blocks if i == 0 else blocks - 1))
    return shapes


def tiles(h: int, m: int) -> int:
    """F(m x m, 3 x 3)'s output tiles along a side of h (the last one padded whole)."""
    return -(-h // m)


def conv_model(n: int, c: int, h: int, m: int | None, seed: int = 0) -> onnx.ModelProto:
    """Conv 3x3/1 (pads 1) + bias + Relu on [n, c, h, h]: direct (m None) or as F(m x m, 3 x 3)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((c, c, 3, 3)) * np.sqrt(2 / (9 * c))
    b = rng.standard_normal(c) * 0.1
    inits: list[onnx.TensorProto] = []

    def const(name: str, value: np.ndarray, dtype: type = np.float32) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    if m is None:
        nodes = [helper.make_node("Conv", ["x", const("w", w), const("b", b)], ["c"],
                                  kernel_shape=[3, 3], pads=[1] * 4)]
    else:
        bt, g, at = (np.array(a, np.float64) for a in MATRICES[m])
        a, t = m + 2, tiles(h, m)  # tile size, tiles a side
        pad = t * m + 2 - h - 1  # bottom/right padding: whole tiles
        k_in = np.tile(np.einsum("xi,vj->xvij", bt, bt).reshape(a * a, 1, a, a), (c, 1, 1, 1))
        u = np.einsum("xk,ockl,vl->xvoc", g, w, g).reshape(a * a, c, c)
        k_out = np.einsum("pi,qj->pqij", at, at).reshape(m * m, a * a)  # (p,q) from (i,j)
        nodes = [
            helper.make_node("Conv", ["x", const("k_in", k_in)], ["v"], kernel_shape=[a, a],
                             strides=[m, m], pads=[1, 1, pad, pad], group=c),
            helper.make_node("Reshape", ["v", const("s1", [n, c, a * a, t * t], np.int64)], ["v1"]),
            helper.make_node("Transpose", ["v1"], ["v2"], perm=[2, 1, 0, 3]),  # a2, C, N, T
            helper.make_node("Reshape", ["v2", const("s2", [a * a, c, n * t * t], np.int64)],
                             ["v3"]),
            helper.make_node("MatMul", [const("u", u), "v3"], ["p"]),  # a2, C out, N*T
            helper.make_node("Reshape", ["p", const("s3", [a * a, c, n, t * t], np.int64)], ["p1"]),
            helper.make_node("Transpose", ["p1"], ["p2"], perm=[2, 1, 0, 3]),  # N, C out, a2, T
            helper.make_node("Reshape", ["p2", const("s4", [n, c * a * a, t, t], np.int64)],
                             ["p3"]),
            helper.make_node("Conv", ["p3", const("k_out", np.tile(k_out, (c, 1))[..., None, None]),
                                      const("b", np.repeat(b, m * m))], ["y1"], group=c),
            helper.make_node("DepthToSpace", ["y1"], ["y2"], blocksize=m, mode="CRD"),
            helper.make_node("Slice", ["y2", const("start", [0, 0], np.int64),
                                       const("end", [h, h], np.int64),
                                       const("axes", [2, 3], np.int64)], ["c"]),
        ]
    nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    graph = helper.make_graph(
        nodes, "conv3x3", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, h])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, c, h, h])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def onnxruntime_runner(model: onnx.ModelProto) -> Callable[[np.ndarray], np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return lambda x: session.run(None, {"x": x})[0]


def openvino_runner(model: onnx.ModelProto) -> Callable[[np.ndarray], np.ndarray]:
    import openvino as ov

    core = ov.Core()
    config = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}
    compiled = core.compile_model(core.read_model(model.SerializeToString(), b""), "CPU", config)
    request = compiled.create_infer_request()
    return lambda x: request.infer({0: x})[0]


def products_model(n: int, c: int, h: int, m: int) -> onnx.ModelProto:
    """F(m x m, 3 x 3)'s products alone: the batched MatMul of ``conv_model`` on its input
    ``x`` [(m+2)^2, c, n * tiles], what a fused kernel whose transforms cost nothing would run."""
    a, t = m + 2, tiles(h, m)
    u = np.random.default_rng(0).standard_normal((a * a, c, c)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["u", "x"], ["y"])], "products",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [a * a, c, n * t * t])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [a * a, c, n * t * t])],
        [numpy_helper.from_array(u, "u")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


RUNNERS = {"onnxruntime": onnxruntime_runner, "openvino": openvino_runner}
FORMS = {"direct": None, "F(2x2,3x3)": 2, "F(4x4,3x3)": 4}
PRODUCTS = " products"  # suffix of the forms that time the products alone


def measure(runtime: str, batch: int, rounds: int) -> dict[tuple[int, int], dict[str, float]]:
    """Best seconds per form (and per rewrite's products alone), per (channels, size); fails
    if a rewrite disagrees with the direct form."""
    times: dict[tuple[int, int], dict[str, float]] = {}
    rng = np.random.default_rng(1)
    for c, h, _ in stride1_shapes():
        x = rng.random((batch, c, h, h), np.float32)
        runs = {form: (RUNNERS[runtime](conv_model(batch, c, h, m)), x)
                for form, m in FORMS.items()}
        direct = runs["direct"][0](x)
        for form, (run, _) in runs.items():
            error = float(np.abs(run(x) - direct).max() / np.abs(direct).max())
            if error > TOLERANCE:
                raise SystemExit(f"{runtime} {form} on {c}x{h}x{h} is off by {error:.1e}")
        for form, m in FORMS.items():
            if m is not None:
                t = tiles(h, m)
                runs[form + PRODUCTS] = (RUNNERS[runtime](products_model(batch, c, h, m)),
                                         rng.random(((m + 2) ** 2, c, batch * t * t), np.float32))
        best = {form: float("inf") for form in runs}
        for _ in range(rounds):
            for form, (run, inputs) in runs.items():
                start = time.perf_counter()
                run(inputs)
                best[form] = min(best[form], time.perf_counter() - start)
        times[(c, h)] = best
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=32, help="images a run (vision_cpu.py's: 32)")
    p.add_argument("--rounds", type=int, default=8, help="timed rounds per form (best taken)")
    args = p.parse_args()
    shapes = stride1_shapes()
    share = {(c, h): n * h * h * c * c * 9 / MACS for c, h, n in shapes}
    total = sum(share.values())
    print(f"ResNet-50 v1.5: the stride-1 3x3 convolutions are {total:.1%} of its MACs; batch "
          f"{args.batch}; best of {args.rounds} rounds")
    for runtime in (r for r in RUNNERS if installed(r)):
        times = measure(runtime, args.batch, args.rounds)
        rewrite = free = 1 - total  # the model's time, the direct form's = 1
        for (c, h), best in times.items():
            d = best["direct"]
            print(f"  {runtime:11} {c:3} ch {h:2}x{h:<2}: direct {d * 1e3:6.1f} ms; " + "; ".join(
                f"{form} {best[form] * 1e3:6.1f} ms ({d / best[form]:.2f}x; products alone "
                f"{d / best[form + PRODUCTS]:.2f}x)" for form in FORMS if form != "direct"))
            whole = [t for form, t in best.items() if not form.endswith(PRODUCTS)]
            rewrite += share[(c, h)] * min(whole) / d
            free += share[(c, h)] * min(best.values()) / d
        count = {m: 1 / (1 - total + total * (m + 2) ** 2 / (9 * m * m)) for m in (2, 4)}
        print(f"RATIO winograd/direct ResNet-50 fp32 ({runtime}) = {1 / rewrite:.2f} (each layer "
              f"in its faster form; with transforms costing nothing {1 / free:.2f}, by "
              f"multiplication count {count[2]:.2f} for F(2x2,3x3), {count[4]:.2f} for F(4x4,3x3))")


if __name__ == "__main__":
    main()
