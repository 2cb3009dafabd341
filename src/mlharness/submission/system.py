"""System description (``systems/<name>.json``): detect what the machine tells us, take the rest
from a TOML the user edits, and make sure every field the checker requires is there.

Field names: ``SYSTEM_DESC_REQUIRED_FIELDS`` in
``tools/submission/submission_checker/constants.py`` (see ``rules/common.toml``). The checker
tests some fields for truthiness, so every value is written as a non-empty string ("0", not 0).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mlharness import hostinfo
from mlharness.backends import framework_of
from mlharness.errors import ConfigError
from mlharness.files import read_toml
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


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def check_name(kind: str, value: str) -> str:
    """A submitter or system name: it becomes a file or directory name, so no '/', no '..'."""
    if not _NAME.match(value or "") or ".." in value:
        raise ConfigError(f"bad {kind} name {value!r}",
                          hint="use letters, digits, '.', '_' or '-' (it becomes a directory name)")
    return value


def detect(backend: str = "onnxruntime") -> dict[str, str]:
    """Everything this machine tells us, as strings; the framework is ``backend``'s."""
    cpu = hostinfo.cpu_info()
    storage, storage_type = hostinfo.storage()
    return {
        "host_processor_model_name": cpu["model"],
        "host_processors_per_node": str(cpu["sockets"]),
        "host_processor_core_count": str(cpu["cores_per_socket"]),
        "host_processor_frequency": hostinfo.cpu_frequency(cpu["mhz"]),
        "host_processor_caches": hostinfo.cpu_caches(),
        "host_memory_capacity": hostinfo.memory(),
        "host_storage_capacity": storage,
        "host_storage_type": storage_type,
        "host_network_card_count": hostinfo.nic_count(),
        "operating_system": hostinfo.os_name(),
        **hostinfo.nvidia_accelerators(),
        **hostinfo.software(framework_of(backend)),
    }


#: the system types a suite is judged as, tried in this order when none is given
SYSTEM_TYPES = ("edge", "datacenter", "datacenter,edge")
#: each one's system_type_detail when it is derived
TYPE_DETAILS = {"edge": "edge server", "datacenter": "datacenter server",
                "datacenter,edge": "datacenter and edge server"}


def system_type_for(benchmarks: dict[str, list[str]]) -> str | None:
    """The first system type (edge, datacenter, both) whose suite holds every benchmark (its
    required scenarios in the round: llama3.1-8b is datacenter only, resnet50 edge or both),
    from ``{benchmark: the round's system types with required scenarios}``; None: no one."""
    for kind in SYSTEM_TYPES:
        if all(kind in kinds for kinds in benchmarks.values()):
            return kind
    return None


def load_user_toml(path: Path) -> dict[str, Any]:
    """The user's fields (top level or a ``[system]`` table)."""
    data = read_toml(path, "system TOML",
                     hint_missing="write one with `mlharness system template --output my.toml`")
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

# Network division only (LoadGen on one machine, `mlharness serve` nodes on others): set
# division = "network", number_of_nodes, and every field below (docs/distributed.md).
# is_network = "true"
# network_type = "Ethernet"
# network_media = "copper, DAC"
# network_rate = "25 Gbit/s"
# nic_loadgen = "Mellanox ConnectX-5"
# number_nic_loadgen = "1"
# net_software_stack_loadgen = "Linux TCP/IP, HTTP/1.1 (Python http.client), mlharness remote backend"
# network_protocol = "TCP/IP, HTTP/1.1 with binary bodies"
# number_connections = "2 per SUT node"
# nic_sut = "Mellanox ConnectX-5"
# number_nic_sut = "1"
# net_software_stack_sut = "Linux TCP/IP, uvicorn + FastAPI (mlharness serve)"
# network_topology = "one switch, LoadGen node and SUT nodes on it"
"""
