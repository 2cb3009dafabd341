"""What this machine and its Python environment are: the one place that probes them.

Used for the short description in every run.json and for the submission's system JSON.
"""

from __future__ import annotations

import os
import platform
import re
import resource
import shutil
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

#: packages whose versions every run.json records
RUN_PACKAGES = ("mlharness", "mlcommons-loadgen", "numpy", "onnxruntime", "onnx", "torch",
                "openvino", "tokenizers", "pillow")


def read_text(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def cpu_info() -> dict[str, Any]:
    text = read_text("/proc/cpuinfo")
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    sockets = set(re.findall(r"^physical id\s*:\s*(\d+)$", text, re.M))
    cores = re.search(r"^cpu cores\s*:\s*(\d+)$", text, re.M)
    mhz = re.search(r"^cpu MHz\s*:\s*([\d.]+)$", text, re.M)
    n_sockets = max(len(sockets), 1)
    per_socket = int(cores.group(1)) if cores else max((os.cpu_count() or 1) // n_sockets, 1)
    return {
        "model": model.group(1).strip() if model else platform.processor() or platform.machine(),
        "sockets": n_sockets,
        "cores_per_socket": per_socket,
        "mhz": float(mhz.group(1)) if mhz else None,
    }


def cpu_frequency(mhz: float | None) -> str:
    max_khz = read_text("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").strip()
    if max_khz.isdigit():
        return f"{int(max_khz) / 1e6:.2f} GHz (max)"
    return f"{mhz / 1000:.2f} GHz" if mhz else "unknown"


def cpu_caches() -> str:
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    parts = []
    for index in sorted(base.glob("index*")):
        level = read_text(str(index / "level")).strip()
        kind = read_text(str(index / "type")).strip()
        size = read_text(str(index / "size")).strip()
        if not level or not size:
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        parts.append(f"L{level}{suffix} {size}")
    return ", ".join(parts) or "unknown"


def memory() -> str:
    m = re.search(r"^MemTotal:\s*(\d+)\s*kB", read_text("/proc/meminfo"), re.M)
    return f"{int(m.group(1)) / 1024 ** 2:.0f} GB" if m else "unknown"


def storage() -> tuple[str, str]:
    total = shutil.disk_usage("/").total
    kinds = set()
    for dev in Path("/sys/block").glob("*"):
        if dev.name.startswith(("loop", "ram", "zram")):
            continue
        if dev.name.startswith("vd"):
            kinds.add("virtual disk (virtio)")
        elif dev.name.startswith("nvme"):
            kinds.add("NVMe SSD")
        else:
            rot = read_text(str(dev / "queue" / "rotational")).strip()
            kinds.add("HDD" if rot == "1" else "SSD")
    return f"{total / 1e9:.0f} GB", ", ".join(sorted(kinds)) or "unknown"


def os_name() -> str:
    m = re.search(r'^PRETTY_NAME="?([^"\n]+)"?', read_text("/etc/os-release"), re.M)
    name = m.group(1) if m else platform.system()
    return f"{name}, kernel {platform.release()}"


def nic_count() -> str:
    nets = [p.name for p in Path("/sys/class/net").glob("*") if p.name != "lo"
            and (p / "device").exists()]
    return str(len(nets)) if nets else "1"


def nvidia_accelerators() -> dict[str, str]:
    """NVIDIA GPUs via nvidia-smi when present; otherwise nothing (the defaults say "none")."""
    if shutil.which("nvidia-smi") is None:
        return {}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    gpus = [line.split(",") for line in out.splitlines() if line.strip()]
    if not gpus:
        return {}
    return {"accelerators_per_node": str(len(gpus)), "accelerator_model_name": gpus[0][0].strip(),
            "accelerator_memory_capacity": gpus[0][1].strip() if len(gpus[0]) > 1 else "unknown"}


def version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def software(framework: str | None = None) -> dict[str, str]:
    """Framework (as the backend names it) and software stack strings."""
    framework = framework or "unknown"
    stack = [f"mlharness {version('mlharness') or 'dev'}",
             f"mlcommons-loadgen {version('mlcommons-loadgen') or 'unknown'}",
             f"Python {platform.python_version()}"]
    for dist in ("numpy", "onnxruntime", "torch", "openvino"):
        v = version(dist)
        if v:
            stack.append(f"{dist} {v}")
    return {"framework": framework, "other_software_stack": ", ".join(stack)}


def memory_gib() -> float | None:
    m = re.search(r"^MemTotal:\s*(\d+)\s*kB", read_text("/proc/meminfo"), re.M)
    return round(int(m.group(1)) / 1024 ** 2, 1) if m else None


def available_memory_bytes() -> int | None:
    """Memory the kernel says new work can use now (``MemAvailable``), or None if unknown."""
    m = re.search(r"^MemAvailable:\s*(\d+)\s*kB", read_text("/proc/meminfo"), re.M)
    return int(m.group(1)) * 1024 if m else None


def spare_descriptors() -> int | None:
    """Half this process's file-descriptor limit (its soft ``RLIMIT_NOFILE``): what a pool of
    connections may take and leave the model, the data and the threads the rest; None when
    unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft // 2


def package_versions(names: tuple[str, ...] = RUN_PACKAGES) -> dict[str, str]:
    """Installed versions of ``names`` (missing ones left out)."""
    return {name: v for name in names if (v := version(name))}


def describe_system() -> dict[str, Any]:
    """The short machine description kept in every run.json."""
    return {
        "hostname": platform.node(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "cpu": cpu_info()["model"],
        "cpus": os.cpu_count(),
        "memory_gib": memory_gib(),
        "cpu_matrix": matrix_isa(),
    }


#: /proc/cpuinfo flags that decide the fast paths for reduced precision, best first
MATRIX_FLAGS = ("amx_bf16", "amx_int8", "amx_tile", "avx512_bf16", "avx512_vnni", "avx512f",
                "avx_vnni", "avx2")


def cpu_flags() -> set[str]:
    """The CPU's feature flags (first processor of /proc/cpuinfo); empty if unreadable."""
    m = re.search(r"^flags\s*:\s*(.+)$", read_text("/proc/cpuinfo"), re.M)
    return set(m.group(1).split()) if m else set()


#: where oneDNN reads its ISA cap (the second is its old name); OpenVINO and PyTorch run on it
ONEDNN_ISA_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
#: the cap's values (``dnnl_cpu_isa_t``, oneDNN's developer guide) -> the matrix flags it leaves
_AVX2, _ALL = {"avx2"}, set(MATRIX_FLAGS)
_AVX2_VNNI = _AVX2 | {"avx_vnni"}
_AVX512_VNNI = _AVX2_VNNI | {"avx512f", "avx512_vnni"}
_AVX512_BF16 = _AVX512_VNNI | {"avx512_bf16"}
ONEDNN_ISA_CAPS: dict[str, set[str]] = {
    "SSE41": set(), "AVX": set(), "AVX2": _AVX2, "AVX2_VNNI": _AVX2_VNNI,
    "AVX2_VNNI_2": _AVX2_VNNI, "AVX512_CORE": _AVX2 | {"avx512f"},
    "AVX512_CORE_VNNI": _AVX512_VNNI, "AVX512_CORE_BF16": _AVX512_BF16,
    "AVX512_CORE_FP16": _AVX512_BF16, "AVX10_1_512": _AVX512_BF16,
    "AVX512_CORE_AMX": _ALL, "AVX512_CORE_AMX_FP16": _ALL, "AVX10_1_512_AMX": _ALL,
    "AVX10_1_512_AMX_FP16": _ALL, "ALL": _ALL, "DEFAULT": _ALL,
}


def onednn_isa_cap() -> str | None:
    """The cap the first set of ``ONEDNN_ISA_VARIABLES`` names, if it names one."""
    value = next((v for v in map(os.environ.get, ONEDNN_ISA_VARIABLES) if v), "").upper()
    return value if value in ONEDNN_ISA_CAPS else None


def matrix_isa(flags: set[str] | None = None, cap: str | None = None) -> dict[str, Any]:
    """Which bf16 / int8 paths this CPU has: ``{"flags": [...], "bf16": ..., "int8": ...}``.

    ``bf16``/``int8`` name the best hardware path (``amx``, ``avx512_bf16``, ``avx512_vnni``,
    ``avx_vnni``, and for int8 without VNNI ``avx2``: u8 x s8 pairs summed into int16, about
    half VNNI's rate) or None when there is none (bf16 is refused: it would be emulated).
    Under oneDNN's ISA cap (``cap``, else ``ONEDNN_MAX_CPU_ISA``: OpenVINO and PyTorch obey
    it, onnxruntime does not) they are the paths the cap leaves, and ``onednn_max_cpu_isa``
    names it; ``flags`` stay the CPU's.
    """
    flags = cpu_flags() if flags is None else flags
    cap = cap if cap is not None else onednn_isa_cap()
    usable = flags & ONEDNN_ISA_CAPS[cap] if cap else flags
    bf16 = "amx" if "amx_bf16" in usable else "avx512_bf16" if "avx512_bf16" in usable else None
    int8 = ("amx" if "amx_int8" in usable else "avx512_vnni" if "avx512_vnni" in usable
            else "avx_vnni" if "avx_vnni" in usable else "avx2" if "avx2" in usable else None)
    out = {"flags": [f for f in MATRIX_FLAGS if f in flags], "bf16": bf16, "int8": int8}
    if cap:
        out["onednn_max_cpu_isa"] = cap
    return out
