"""The official ``audit.config`` values of each compliance test, as data, and their rendering.

LoadGen reads ``audit.config`` from its working directory and applies it with the model name
``"*"`` (``loadgen/loadgen.cc`` StartTest -> ``FromConfig(audit, "*", scenario, 2)``), so only
``*.<Scenario>.key`` and ``*.*.key`` lines take effect; we write nothing else. TEST07 and TEST09
files also carry their thresholds (``*.*.test07_accuracy_threshold``,
``*.*.test09_{min,max}_output_tokens``), which LoadGen ignores and ``run_verification.py`` reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlharness.errors import ConfigError
from mlharness.loadgen.settings import SCENARIOS
from mlharness.rules import DEFAULT_ROUND, BenchmarkRules, load
from mlharness.rules.loader import load as load_rules

#: the LLM tests: judged on the audit's accuracy log alone (no reference run)
LLM_TESTS = ("TEST06", "TEST07", "TEST09")
TESTS = ("TEST01", "TEST04", "TEST05", *LLM_TESTS)

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
#: ``compliance/TEST06/audit.config`` after mode and seed (every LLM benchmark)
TEST06_ENTRIES: dict[str, int] = {k: int(v) for k, v in _AUDIT["test06"].items()}
#: ``compliance/TEST07/<dir>/audit.config`` and ``TEST09``'s: LoadGen's keys by directory name
TEST07_ENTRIES: dict[str, dict[str, int]] = {
    d: {k: int(v) for k, v in e.items()} for d, e in _AUDIT["test07"].items()}
TEST09_ENTRIES: dict[str, dict[str, int]] = {
    d: {k: int(v) for k, v in e.items()} for d, e in _AUDIT["test09"].items()}


@dataclass(frozen=True)
class AuditConfig:
    """One compliance test's LoadGen overrides: ``{(scenario or "*", key): value}``."""

    test: str
    model: str
    entries: tuple[tuple[str, str, int | float], ...]

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


def llm_benchmark(model: str) -> BenchmarkRules | None:
    """The generation benchmark whose mlperf.conf model key (or name) is ``model`` (None: not
    one), the round's own before one kept to read older results."""
    rules = load(DEFAULT_ROUND)
    found = [b for b in (*rules.benchmarks.values(), *rules.kept.values()) if b.generates
             and model in (b.name, b.loadgen_model, b.interactive_loadgen_model)]
    return found[0] if found else None


def _llm_entries(test: str, model: str) -> tuple[tuple[str, str, int | float], ...]:
    bench = llm_benchmark(model)
    if bench is None:
        raise ConfigError(f"{test} audits the LLM benchmarks, not {model!r}",
                          hint="TEST06: llama3.1-8b, llama2-70b-99.9, deepseek-r1; TEST07 and "
                               "TEST09: gpt-oss-120b")
    head: list[tuple[str, str, int | float]] = [
        ("*", "mode", PERFORMANCE_ONLY),
        ("*", "accuracy_log_rng_seed", TEST01_ACCURACY_LOG_RNG_SEED)]
    if test == "TEST06":
        return tuple(head + [("*", k, v) for k, v in TEST06_ENTRIES.items()])
    table = TEST07_ENTRIES if test == "TEST07" else TEST09_ENTRIES
    if bench.name not in table:
        raise ConfigError(f"no official {test} audit.config for {bench.name}",
                          hint=f"{test} has one for: " + ", ".join(sorted(table)))
    head += [("*", k, v) for k, v in table[bench.name].items()]
    if test == "TEST07":
        assert bench.test07_accuracy_threshold is not None  # rules: with its audit.config
        head.append(("*", "test07_accuracy_threshold", bench.test07_accuracy_threshold))
    else:
        assert bench.test09_output_tokens is not None
        head += [("*", "test09_min_output_tokens", bench.test09_output_tokens["min"]),
                 ("*", "test09_max_output_tokens", bench.test09_output_tokens["max"])]
    return tuple(head)


def audit_config(test: str, model: str) -> AuditConfig:
    """The official audit.config of ``test`` for ``model`` (the task's ``loadgen_model``)."""
    entries: tuple[tuple[str, str, int | float], ...]
    if test in LLM_TESTS:
        entries = _llm_entries(test, model)
    elif test == "TEST01":
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
