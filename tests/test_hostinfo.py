"""The CPU's matrix paths (``hostinfo.matrix_isa``) and oneDNN's ISA cap: what run.json says
about bf16 / int8 is what OpenVINO and PyTorch can use, also under ``ONEDNN_MAX_CPU_ISA``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlharness.cli.main import main
from mlharness.hostinfo import ONEDNN_ISA_VARIABLES, cpu_flags, matrix_isa
from mlharness.tasks.demo import DEMO_MODEL

XEON_AMX = {"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_bf16", "amx_int8",
            "amx_tile", "fpu", "sse4_2"}
EPYC_ZEN4 = {"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "fpu"}
EPYC_AVX2 = {"avx2", "fpu"}


@pytest.fixture(autouse=True)
def no_cap_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """``cap=None`` reads the environment: these tests set it themselves."""
    for name in ONEDNN_ISA_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("flags, cap, bf16, int8", [
    (XEON_AMX, None, "amx", "amx"),
    (XEON_AMX, "AVX512_CORE_BF16", "avx512_bf16", "avx512_vnni"),
    (XEON_AMX, "AVX512_CORE_VNNI", None, "avx512_vnni"),
    (XEON_AMX, "AVX2_VNNI", None, "avx_vnni"),
    (XEON_AMX, "AVX2", None, "avx2"),
    (XEON_AMX, "SSE41", None, None),
    (XEON_AMX, "AVX512_CORE_AMX", "amx", "amx"),
    (EPYC_ZEN4, None, "avx512_bf16", "avx512_vnni"),
    (EPYC_ZEN4, "AVX512_CORE_AMX", "avx512_bf16", "avx512_vnni"),  # a cap above the CPU
    (EPYC_AVX2, None, None, "avx2"),
    (EPYC_AVX2, "ALL", None, "avx2"),
])
def test_paths_are_the_cpus_under_the_cap(flags: set[str], cap: str | None, bf16: str | None,
                                          int8: str | None) -> None:
    isa = matrix_isa(flags, cap)
    assert (isa["bf16"], isa["int8"]) == (bf16, int8)
    assert isa.get("onednn_max_cpu_isa") == cap
    assert set(isa["flags"]) == flags - {"fpu", "sse4_2"}  # the CPU's own flags, never capped


@pytest.mark.parametrize("name", ONEDNN_ISA_VARIABLES)
def test_the_cap_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    uncapped = matrix_isa(XEON_AMX)
    assert (uncapped["bf16"], uncapped["int8"]) == ("amx", "amx")
    monkeypatch.setenv(name, "avx512_core_vnni")  # OpenVINO's oneDNN took any case here
    assert matrix_isa(XEON_AMX) == matrix_isa(XEON_AMX, "AVX512_CORE_VNNI")
    assert matrix_isa(XEON_AMX)["onednn_max_cpu_isa"] == "AVX512_CORE_VNNI"
    monkeypatch.setenv(name, "not-an-isa")  # oneDNN ignores what it does not know: so do we
    assert matrix_isa(XEON_AMX) == uncapped


def test_run_json_records_the_capped_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    runs = tmp_path / "runs"
    assert main(["run", "-b", "demo", "--mode", "accuracy", "--no-progress",
                 "--output-dir", str(runs)]) == 0
    [run_json] = runs.glob("*/*/run.json")
    cpu_matrix = json.loads(run_json.read_text())["system"]["cpu_matrix"]
    assert cpu_matrix["onednn_max_cpu_isa"] == "AVX2"
    assert cpu_matrix["bf16"] is None
    assert cpu_matrix["int8"] == ("avx2" if "avx2" in cpu_flags() else None)


PRIMITIVES = """
import json, openvino as ov
core = ov.Core()
model = core.read_model({model!r})
model.reshape({{"image": [8, 1, 8, 8]}})
compiled = core.compile_model(model, "CPU", {{"INFERENCE_PRECISION_HINT": "f32"}})
print(json.dumps([(op.get_rt_info()["layerType"].astype(str),
                   op.get_rt_info()["primitiveType"].astype(str))
                  for op in compiled.get_runtime_model().get_ops()]))
"""


def openvino_primitives(cap: str | None) -> dict[str, str]:
    """Layer type -> kernel of the demo MLP compiled by OpenVINO in a process of its own (the
    cap is read once, when oneDNN first asks for the CPU's ISA)."""
    env = {k: v for k, v in os.environ.items() if k not in ONEDNN_ISA_VARIABLES}
    if cap:
        env["ONEDNN_MAX_CPU_ISA"] = cap
    done = subprocess.run([sys.executable, "-c", PRIMITIVES.format(model=str(DEMO_MODEL))],
                          env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.splitlines()[-1]))


def test_openvino_obeys_the_cap_in_its_compute_layers() -> None:
    """The MLP's layers run as one fused subgraph; under an AVX2 cap its kernel is an AVX2
    one. (OpenVINO's TopK kernel ignores the cap: it is not a matrix layer.)"""
    pytest.importorskip("openvino", reason="the openvino extra is not installed")
    capped = openvino_primitives("AVX2")["Subgraph"]
    assert "avx2" in capped and "avx512" not in capped and "amx" not in capped
    if "avx512f" in cpu_flags():  # and without the cap, the same layers use AVX-512
        assert "avx512" in openvino_primitives(None)["Subgraph"]
