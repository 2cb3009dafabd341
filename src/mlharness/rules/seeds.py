"""The seeds a run under ``--round`` gives LoadGen from code (LoadGen 6.0.17 reads seeds only from
its compiled-in mlperf.conf, which holds v6.1's)."""

from __future__ import annotations

from mlharness.errors import ConfigError
from mlharness.rules.loader import load


def loadgen_seeds(round: str | None, test05: bool = False) -> dict[str, int]:
    """``TestSettings`` attributes for ``round`` (empty: LoadGen's own seeds). A TEST05 audit
    (``test05``) also gets the round's TEST05 seeds and ``test05 = 1``, which is what that
    round's ``compliance/nvidia/TEST05/audit.config`` (``*.*.test05 = 1``) made LoadGen use."""
    if round is None:
        if test05:
            raise ConfigError("TEST05 needs a round that required it",
                              hint="pass --round v4.1 (or v4.0, v3.1, v3.0, v2.1)")
        return {}
    rules = load(round)
    seeds = dict(rules.seeds)
    if test05:
        if not rules.test05_seeds:
            raise ConfigError(f"TEST05 is retired in {rules.round}: the round has no TEST05 seeds",
                              hint="choose a round before v5.0 (--round v4.1)")
        seeds["test05"] = 1
        seeds.update({f"test05_{k}": v for k, v in rules.test05_seeds.items()})
    return seeds
