"""System description (``systems/<name>.json``): detect what the machine tells us, take the rest
from a TOML the user edits, and make sure every field the checker requires is there.

Field names: ``SYSTEM_DESC_REQUIRED_FIELDS`` in
``tools/submission/submission_checker/constants.py`` (see ``rules/common.toml``). The checker
tests some fields for truthiness, so every value is written as a non-empty string ("0", not 0).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

from mlharness.errors import ConfigError
from mlharness.rules.model import Rules
from mlharness.rules.problems import Problem

#: what we fill in when neither the machine nor the user's TOML says otherwise; the CLI lists
#: these so the user reviews them
DEFAULTS: dict[str, str] = {
    "division": "open",
    "status": "available",
    "system_type": "edge",
    "system_type_detail": "edge server",
    "number_of_nodes": "1",
    "accelerators_per_node": "0",
    "accelerator_model_name": "N/A",
    "accelerator_memory_capacity": "N/A",
    "accelerator_frequency": "N/A",
    "accelerator_host_interconnect": "N/A",
    "accelerator_interconnect": "N/A",
    "accelerator_interconnect_topology": "N/A",
    "accelerator_memory_configuration": "N/A",
    "accelerator_on-chip_memories": "N/A",
    "host_processor_interconnect": "N/A (single socket)",
    "host_memory_configuration": "unknown (fill in: DIMMs x size, type, speed)",
    "host_networking": "N/A (single node)",
    "host_networking_topology": "N/A (single node)",
    "cooling": "air",
    "hw_notes": "",
    "sw_notes": "",
}


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _cpuinfo() -> dict[str, Any]:
    text = _read("/proc/cpuinfo")
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


def _frequency(mhz: float | None) -> str:
    max_khz = _read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").strip()
    if max_khz.isdigit():
        return f"{int(max_khz) / 1e6:.2f} GHz (max)"
    return f"{mhz / 1000:.2f} GHz" if mhz else "unknown"


def _caches() -> str:
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    parts = []
    for index in sorted(base.glob("index*")):
        level = _read(str(index / "level")).strip()
        kind = _read(str(index / "type")).strip()
        size = _read(str(index / "size")).strip()
        if not level or not size:
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        parts.append(f"L{level}{suffix} {size}")
    return ", ".join(parts) or "unknown"


def _memory() -> str:
    m = re.search(r"^MemTotal:\s*(\d+)\s*kB", _read("/proc/meminfo"), re.M)
    return f"{int(m.group(1)) / 1024 ** 2:.0f} GB" if m else "unknown"


def _storage() -> tuple[str, str]:
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
            rot = _read(str(dev / "queue" / "rotational")).strip()
            kinds.add("HDD" if rot == "1" else "SSD")
    return f"{total / 1e9:.0f} GB", ", ".join(sorted(kinds)) or "unknown"


def _os() -> str:
    m = re.search(r'^PRETTY_NAME="?([^"\n]+)"?', _read("/etc/os-release"), re.M)
    name = m.group(1) if m else platform.system()
    return f"{name}, kernel {platform.release()}"


def _nics() -> str:
    nets = [p.name for p in Path("/sys/class/net").glob("*") if p.name != "lo"
            and (p / "device").exists()]
    return str(len(nets)) if nets else "1"


def _accelerators() -> dict[str, str]:
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


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def software() -> dict[str, str]:
    """Framework and software stack strings."""
    ort = _version("onnxruntime")
    framework = f"ONNX Runtime {ort}" if ort else "unknown"
    stack = [f"mlharness {_version('mlharness') or 'dev'}",
             f"mlcommons-loadgen {_version('mlcommons-loadgen') or 'unknown'}",
             f"Python {platform.python_version()}"]
    for dist in ("numpy", "onnxruntime", "torch", "openvino"):
        v = _version(dist)
        if v:
            stack.append(f"{dist} {v}")
    return {"framework": framework, "other_software_stack": ", ".join(stack)}


def detect() -> dict[str, str]:
    """Everything this machine tells us, as strings."""
    cpu = _cpuinfo()
    storage, storage_type = _storage()
    return {
        "host_processor_model_name": cpu["model"],
        "host_processors_per_node": str(cpu["sockets"]),
        "host_processor_core_count": str(cpu["cores_per_socket"]),
        "host_processor_frequency": _frequency(cpu["mhz"]),
        "host_processor_caches": _caches(),
        "host_memory_capacity": _memory(),
        "host_storage_capacity": storage,
        "host_storage_type": storage_type,
        "host_network_card_count": _nics(),
        "operating_system": _os(),
        **_accelerators(),
        **software(),
    }


def load_user_toml(path: Path) -> dict[str, Any]:
    """The user's fields (top level or a ``[system]`` table)."""
    if not path.is_file():
        raise ConfigError(f"system TOML not found: {path}",
                          hint="write one with `mlharness system template --output my.toml`")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}", hint="fix the TOML syntax") from exc
    return dict(data.get("system", data))


def as_field(value: Any) -> str:
    """Values the checker tests for truthiness must be non-empty strings: 0 -> "0"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def describe(name: str, user: dict[str, Any] | None = None,
             detected: dict[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """The system description and the list of fields that fell back to :data:`DEFAULTS`.

    Precedence: the user's TOML, then what was detected, then the defaults.
    """
    user = {k: as_field(v) for k, v in (user or {}).items()}
    found = detect() if detected is None else detected
    desc: dict[str, str] = {"system_name": name}
    defaulted: list[str] = []
    for key, value in DEFAULTS.items():
        if key not in user and key not in found:
            desc[key] = value
            defaulted.append(key)
    desc.update(found)
    desc.update(user)
    desc.setdefault("submitter", "")
    return dict(sorted(desc.items())), defaulted


def problems(desc: dict[str, Any], rules: Rules, division: str | None = None,
             submitter: str | None = None, where: str = "") -> list[Problem]:
    """What the checker would reject in ``desc`` (``checks/system_check.py`` rules)."""
    out: list[Problem] = []
    fix = "edit the system TOML and re-run `mlharness system detect --from my.toml`"
    required = list(rules.system_required)
    if str(desc.get("is_network", "")).lower() == "true" or division == "network":
        required += list(rules.system_network)
    for key in required:
        if key not in desc:
            out.append(Problem("system-field-missing", f"field {key} is missing",
                               meaning="the checker requires every system-description field",
                               fix=fix, where=where))
        elif key in rules.system_meaningful and not desc[key]:
            out.append(Problem("system-field-empty", f"field {key} is empty",
                               meaning="the checker requires a meaningful (non-empty, non-zero) value; "
                               "write numbers as strings, e.g. \"0\"", fix=fix, where=where))
    for key in ("number_of_nodes", "accelerators_per_node"):
        if key in desc and not str(desc[key]).strip().isdigit():
            out.append(Problem("system-field-number", f"field {key} is {desc[key]!r}, not a whole number",
                               meaning="the checker multiplies number_of_nodes by accelerators_per_node "
                               "for its summary and crashes on anything else", fix=fix, where=where))
    status = str(desc.get("status", "")).lower()
    if status not in rules.statuses:
        out.append(Problem("system-status", f"status {desc.get('status')!r} is not one of "
                           + ", ".join(rules.statuses),
                           meaning="availability of the system", fix=fix, where=where))
    if desc.get("system_type") not in rules.system_types:
        out.append(Problem("system-type", f"system_type {desc.get('system_type')!r} is not one of "
                           + ", ".join(rules.system_types),
                           meaning="the suite decides the required scenarios", fix=fix, where=where))
    if submitter is not None and str(desc.get("submitter", "")).lower() != submitter.lower():
        out.append(Problem("system-submitter", f"submitter {desc.get('submitter')!r} differs from the "
                           f"directory {submitter!r}", meaning="they must match (case-insensitive)",
                           fix="mlharness submit sets it; edit the JSON or re-run submit", where=where))
    if division is not None and str(desc.get("division", "")).lower() != division.lower():
        out.append(Problem("system-division", f"division {desc.get('division')!r} differs from the "
                           f"directory {division!r}", meaning="they must match",
                           fix="mlharness submit sets it; edit the JSON or re-run submit", where=where))
    is_network = str(desc.get("is_network", "false")).lower() == "true"
    if division in ("closed", "network") and is_network != (division == "network"):
        out.append(Problem("system-network-mode", f"is_network={is_network} does not fit division "
                           f"{division}", meaning="only the network division runs LoadGen over the "
                           "network", fix=fix, where=where))
    return out


TEMPLATE = """# System description fields mlharness cannot detect. Edit, then run
#   mlharness system detect --name NAME --from this.toml --output systems/
# Every value is written as a string; the checker needs non-empty values ("0", "N/A").
[system]
submitter = "MyOrg"
division = "open"                      # open | closed | network
status = "available"                   # available | preview | rdi
system_type = "edge"                   # edge | datacenter | "datacenter,edge"
system_type_detail = "edge server"
cooling = "air"
host_memory_configuration = "unknown (fill in: DIMMs x size, type, speed)"
host_networking = "N/A (single node)"
host_networking_topology = "N/A (single node)"
host_processor_interconnect = "N/A (single socket)"
accelerators_per_node = "0"
accelerator_model_name = "N/A"
hw_notes = ""
sw_notes = ""
"""
