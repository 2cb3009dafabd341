"""The official ``audit.config`` values of each compliance test, as data, and their rendering.

LoadGen reads ``audit.config`` from its working directory and applies it with the model name
``"*"`` (``loadgen/loadgen.cc`` StartTest -> ``FromConfig(audit, "*", scenario, 2)``), so only
``*.<Scenario>.key`` and ``*.*.key`` lines take effect; we write nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlharness.errors import ConfigError
from mlharness.loadgen.settings import SCENARIOS
from mlharness.rules.loader import load as load_rules

TESTS = ("TEST01", "TEST04", "TEST05")

#: the official values live in the round data (``[audit]`` in ``rules/common.toml``)
_AUDIT = load_rules().audit

#: LoadGen ``TestMode`` value 2 = PerformanceOnly (the mode in every official audit.config)
PERFORMANCE_ONLY: int = int(_AUDIT["performance_only_mode"])
#: ``compliance/TEST01/<model>/audit.config``: *.*.accuracy_log_rng_seed
TEST01_ACCURACY_LOG_RNG_SEED: int = int(_AUDIT["test01_accuracy_log_rng_seed"])
#: ``compliance/TEST01/<model>/audit.config``: *.*.accuracy_log_sampling_target by model
TEST01_SAMPLING_TARGET: dict[str, int] = {k: int(v) for k, v in
                                          _AUDIT["test01_sampling_target"].items()}
#: models without an official TEST01 directory that stand in for one that has it
TEST01_STAND_IN: dict[str, str] = dict(_AUDIT["test01_stand_in"])
#: ``compliance/TEST04/audit.config``: the same values for every scenario
TEST04_PER_SCENARIO: dict[str, int] = {"mode": PERFORMANCE_ONLY,
                                       **{k: int(v) for k, v in _AUDIT["test04"].items()}}
#: ``rounds/<round>/compliance/nvidia/TEST05/audit.config``: *.*.test05 (rounds before v5.0; the
#: runner then sets that round's TEST05 seeds from code, ``rules.loadgen_seeds``)
TEST05_FLAG: int = int(_AUDIT["test05"])


@dataclass(frozen=True)
class AuditConfig:
    """One compliance test's LoadGen overrides: ``{(scenario or "*", key): value}``."""

    test: str
    model: str
    entries: tuple[tuple[str, str, int], ...]

    def render(self) -> str:
        """The file text, in LoadGen's ``model.scenario.key = value`` format."""
        lines = [
            f"# {self.test} audit.config written by mlharness for model {self.model!r}",
            "# values from mlcommons/inference compliance/; LoadGen reads it as model '*'",
            "# mode 2 = PerformanceOnly",
        ]
        lines += [f"*.{scenario}.{key} = {value}" for scenario, key, value in self.entries]
        return "\n".join(lines) + "\n"

    def write(self, path: Path) -> Path:
        path.write_text(self.render())
        return path


def test01_sampling_target(model: str) -> int:
    """The official accuracy_log_sampling_target for ``model`` (an mlperf.conf model key)."""
    key = TEST01_STAND_IN.get(model, model)
    if key not in TEST01_SAMPLING_TARGET:
        raise ConfigError(
            f"no official TEST01 audit.config for model {model!r}",
            hint="known models: " + ", ".join(sorted(TEST01_SAMPLING_TARGET)),
        )
    return TEST01_SAMPLING_TARGET[key]


def audit_config(test: str, model: str) -> AuditConfig:
    """The official audit.config of ``test`` for ``model`` (the task's ``loadgen_model``)."""
    entries: tuple[tuple[str, str, int], ...]
    if test == "TEST01":
        entries = (
            ("*", "mode", PERFORMANCE_ONLY),
            ("*", "accuracy_log_rng_seed", TEST01_ACCURACY_LOG_RNG_SEED),
            ("*", "accuracy_log_sampling_target", test01_sampling_target(model)),
        )
    elif test == "TEST04":
        entries = tuple(
            (str(scenario), key, value)
            for scenario in SCENARIOS
            for key, value in TEST04_PER_SCENARIO.items()
        )
    elif test == "TEST05":
        entries = (("*", "test05", TEST05_FLAG),)
    else:
        raise ConfigError(f"unknown compliance test {test!r}",
                          hint="choose one of: " + ", ".join(TESTS))
    return AuditConfig(test, model, entries)


def parse_audit_config(text: str) -> dict[str, str]:
    """``key = value`` lines of an audit.config (comments dropped), for checks and display."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            key, value = (part.strip() for part in line.split("=", 1))
            out[key] = value
    return out
