"""Real qwen3-vl-235b-a22b runs for the tests: the synthetic catalogue (tests/synthetic_catalogue.py)
served by the scripted chat server (tests/vlm_server.py) answering each product with the test's
deterministic answer, run through LoadGen by mlharness with ``--backend openai``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import synthetic_catalogue as sc
from vlm_server import VlmServer

BENCHMARK = "qwen3-vl-235b-a22b"
SCENARIOS = ("Offline", "Server", "Interactive")
#: Offline: every answer 2.1 s after its query, so the 2 s test run is VALID whatever the
#: machine; Server and Interactive: 470 queries (early stopping at p99 wants 459) well inside
#: the bounds
TIMING: dict[str, dict[str, Any]] = {
    "Offline": {"target_qps": 200.0},
    "Server": {"target_qps": 150.0, "min_query_count": 470},
    "Interactive": {"target_qps": 150.0, "min_query_count": 470},
}
#: the Offline server answers each request this long after it came (the run outlasts 2 s)
OFFLINE_SERVICE_S = 2.1
SYSTEM_TOML = """[system]
system_type = "datacenter"
system_type_detail = "datacenter server"
"""


def answerer(rows: list[sc.Row]):  # type: ignore[no-untyped-def]
    def answer(body: dict[str, Any]) -> str:
        i = sc.sample_of(body["messages"])
        return sc.answer(rows[i], i)
    return answer


def spec_for(catalogue: Path, runs: Path, url: str, scenario: str, mode: str) -> Any:
    from mlharness.spec import RunSpec

    timing = TIMING[scenario] if mode == "performance" else {"target_qps": 200.0}
    return RunSpec(benchmark=BENCHMARK, scenario=scenario, mode=mode, backend="openai",
                   dataset=catalogue, output_dir=runs, backend_option={"endpoints": [url]},
                   valid=False, **timing)


def make_runs(root: Path) -> dict[str, Any]:
    """Every scenario's performance and accuracy run (``execute``, the real LoadGen); the run
    directories by ``<scenario>-<mode>``, the catalogue, its rows and the requests served."""
    from mlharness.runner import execute

    catalogue = root / "catalogue"
    rows = sc.write(catalogue)
    runs = root / "runs"
    out: dict[str, Any] = {"runs": runs, "catalogue": catalogue, "rows": rows}
    seen: list[dict[str, Any]] = []
    for scenario in SCENARIOS:
        service = OFFLINE_SERVICE_S if scenario == "Offline" else 0.002
        with VlmServer(answerer(rows), service_s=service) as server:
            for mode in ("performance", "accuracy"):
                record = execute(spec_for(catalogue, runs, server.url, scenario, mode))
                assert record.status == "ok", (scenario, mode, record.error_message)
                out[f"{scenario}-{mode}"] = record.run_dir
        seen += server.seen
    out["seen"] = seen
    return out
