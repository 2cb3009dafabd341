"""Which compliance tests a benchmark needs, per round (closed and network divisions only).

The round rules are the only source (``compliance_tests`` per benchmark in ``rules/<round>.toml``,
from ``tools/submission/submission_checker/constants.py`` ``models_TEST01`` / ``models_TEST04``
and, for the LLMs, ``models_TEST06/07/09``): a round mlharness has no rules for is refused by
``rules.load``.
"""

from __future__ import annotations

from mlharness.compliance.audit_config import TEST01_STAND_IN, TESTS
from mlharness.rules import DEFAULT_ROUND, load


def required_tests(benchmark: str, version: str = DEFAULT_ROUND, division: str = "closed"
                   ) -> list[str]:
    """The compliance tests (TEST01, TEST04; TEST05 before v5.0; TEST06, TEST07, TEST09 for the
    LLMs) ``benchmark`` needs in ``version``; none in open."""
    rules = load(version)  # ConfigError naming the known rounds
    if division.lower() == "open":
        return []
    # by our name or the checker's; the demo is audited like the benchmark it stands in for
    bench = rules.find(TEST01_STAND_IN.get(benchmark, benchmark))
    return [] if bench is None else [t for t in bench.compliance_tests if t in TESTS]
