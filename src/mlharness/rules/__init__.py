"""Round rule tables as data (``<round>.toml`` over ``common.toml``), their loader and the preflight.

    from mlharness import rules
    r = rules.load("v6.1")
    r.benchmark("resnet50").dataset_size          # 50000
    rules.preflight(spec, r)                      # [Problem(...), ...] before a long run
"""

from mlharness.rules.loader import DEFAULT_ROUND, ROUNDS, facts, load, rules_for
from mlharness.rules.model import (AccuracyBound, BenchmarkRules, Generation, Rules, TokenLimit,
                                   normalize_system_type)
from mlharness.rules.preflight import preflight, round_for_seeds, seed_problems
from mlharness.rules.problems import Problem
from mlharness.rules.seeds import loadgen_seeds

__all__ = [
    "DEFAULT_ROUND", "ROUNDS", "AccuracyBound", "BenchmarkRules", "Generation", "Problem", "Rules",
    "TokenLimit", "facts", "load", "loadgen_seeds", "normalize_system_type", "preflight",
    "round_for_seeds", "rules_for", "seed_problems",
]
