"""`tune` for the LLM benchmarks: Server and Interactive searched for the highest target QPS whose
TTFT p99 and TPOT p99 stay within their limits (LoadGen's verdict, >= 460 queries a probe), the
broken limit steering the search and said in words, `-s all` as the benchmark's own scenarios,
`run -s Interactive --target-qps auto`.

The steering is checked on scripted probes (no LoadGen, instant); the real searches run the
TimedStream test backend modelling a server whose TPOT grows with the streams in flight, so the
edge is known analytically and asserted within a wide margin.
"""

from __future__ import annotations

import re

import json
import math
from pathlib import Path
from typing import Any, Callable

import pytest
from llm_fixtures import articles, write_cnn_dataset

import mlharness.tune as tune_pkg
import mlharness.tune.latency as latency_mod
import mlharness.tune.server as server_mod
from mlharness.cli.main import main
from mlharness.spec import RunSpec
from mlharness.tune import Tuned, search_server_qps
from mlharness.tune.probe import Point
from mlharness.tune.scenario import benchmark_scenarios

INTERACTIVE_TPOT_MS = 30.0  # llama3.1-8b Interactive (rules/v6.1.toml)
INTERACTIVE_TTFT_MS = 500.0


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cnn_eval.json of 20 prompts (performance runs need no tokenizer: ids are any ints)."""
    path = tmp_path_factory.mktemp("llm") / "cnn_eval.json"
    return write_cnn_dataset(path, articles(20),
                             lambda text: [len(w) for w in text.split()])


# ---- which scenarios `tune -s all` measures ------------------------------------------------------

def test_all_means_the_benchmarks_own_scenarios(dataset: Path, runs_dir: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert benchmark_scenarios("llama3.1-8b") == ["Offline", "Server", "Interactive"]
    assert benchmark_scenarios("llama3.1-8b-edge") == ["SingleStream", "Offline"]
    assert benchmark_scenarios("demo") == ["SingleStream", "MultiStream", "Server", "Offline"]
    seen: list[str] = []

    def fake(spec: RunSpec, **_: Any) -> Tuned:
        seen.append(str(spec.scenario))
        return Tuned(spec.benchmark, spec.scenario, 1.0, 1.0, "scripted")

    monkeypatch.setattr(tune_pkg, "tune_scenario", fake)
    for bench, extra, want in (
            ("llama3.1-8b", ["--dataset", str(dataset), "--backend",
                             "stream_backends:TimedStream"], ["Offline", "Server", "Interactive"]),
            ("llama3.1-8b-edge", ["--dataset", str(dataset), "--backend",
                                  "stream_backends:TimedStream"], ["SingleStream", "Offline"]),
            ("demo", [], ["SingleStream", "MultiStream", "Server", "Offline"])):
        seen.clear()
        assert main(["tune", "-b", bench, "-s", "all", "--json", "--output-dir", str(runs_dir),
                     *extra]) == 0
        assert seen == want, bench
        chosen = json.loads(capsys.readouterr().out)["chosen"]
        assert [c["scenario"] for c in chosen] == want


# ---- the search on scripted probes: how a broken limit steers it ---------------------------------

System = Callable[[float], dict[str, float]]


def _scripted(system: System, tokens: bool = True) -> Callable[..., Point]:
    """A probe function answering from ``system(qps)``: completed rate, TTFT and TPOT p99."""
    def probe(spec: RunSpec, progress: Any = None, **changes: Any) -> Point:
        scenario = str(changes.get("scenario", spec.scenario))
        if scenario == "SingleStream":  # the rough latency probe a search may start from
            return Point(scenario, 1000.0, 20.0, "VALID", p50_ms=20.0, mean_ms=20.0)
        qps = float(changes["target_qps"])
        got = system(qps)
        ttft, tpot = got["ttft"], got["tpot"]
        valid = ttft <= INTERACTIVE_TTFT_MS and tpot <= INTERACTIVE_TPOT_MS
        point = Point(scenario, qps, got.get("done", qps), "VALID" if valid else "INVALID",
                      reasons=[] if valid else ["latency constraint not met"])
        if tokens:
            point.tokens_per_s = 8 * point.value  # type: ignore[operator]
            point.ttft_p99_ms, point.tpot_p99_ms = ttft, tpot
            point.ttft_limit_ms, point.tpot_limit_ms = INTERACTIVE_TTFT_MS, INTERACTIVE_TPOT_MS
        else:  # the same system judged as a plain Server run: only LoadGen's verdict
            point.p99_ms = tpot
        return point
    return probe


def _tpot_bound(qps: float) -> dict[str, float]:
    """TPOT p99 = 5 ms / (1 - rate / 400): the 30 ms limit binds at 333.3 QPS."""
    load = qps / 400.0
    return {"ttft": 20.0, "tpot": 5.0 / (1 - load) if load < 1 else 10_000.0}


def _search(monkeypatch: pytest.MonkeyPatch, system: System, tokens: bool = True,
            **kw: Any) -> server_mod.ServerSearch:
    monkeypatch.setattr(server_mod, "probe", _scripted(system, tokens))
    monkeypatch.setattr(latency_mod, "probe", _scripted(system, tokens))
    spec = RunSpec(benchmark="llama3.1-8b", scenario="Interactive")
    return search_server_qps(spec, recheck_invalid=False, **kw)


def test_a_broken_tpot_limit_steers_the_search_to_its_edge(
        monkeypatch: pytest.MonkeyPatch) -> None:
    steered = _search(monkeypatch, _tpot_bound, start_qps=50.0)
    plain = _search(monkeypatch, _tpot_bound, tokens=False, start_qps=50.0)
    edge = 400.0 * (1 - 5.0 / 30.0)
    for search in (steered, plain):
        assert search.best is not None and edge / 1.05 <= search.best.target <= edge
        assert all(p.scenario == "Interactive" for p in search.points)
    # the TPOT p99s on either side of the edge place the next probe: fewer probes than bisecting
    assert len(steered.points) < len(plain.points)
    over = [p for p in steered.points if not p.valid]
    assert over and all(p.over_limits() == ["TPOT"] for p in over)
    assert "TPOT p99" in over[0].why() and "over its 30 ms limit" in over[0].why()
    assert steered.note.startswith(f"the edge above {steered.best.target:,.1f} QPS") \
        and "TPOT p99" in steered.note


def test_ttft_over_its_limit_while_falling_behind_aims_at_the_rate_completed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def queue(qps: float) -> dict[str, float]:  # a server that completes 300 requests/s at most
        if qps <= 300:
            return {"ttft": 40.0 + 400.0 * (qps / 300) ** 8, "tpot": 10.0}
        return {"ttft": 5000.0, "tpot": 10.0, "done": 300.0}

    search = _search(monkeypatch, queue, start_qps=50.0)
    assert search.best is not None and 250 <= search.best.target <= 300
    first_over = next(p for p in search.points if not p.valid)
    assert first_over.over_limits() == ["TTFT"]
    # the probe after it went just under what the server completed, not half-way down
    after = search.points[search.points.index(first_over) + 1]
    assert after.target >= 0.7 * 300 and "prompts wait for the server" in first_over.why()


def test_a_limit_no_lower_rate_meets_ends_the_search_in_words(
        monkeypatch: pytest.MonkeyPatch) -> None:
    slow = lambda qps: {"ttft": 20.0, "tpot": 42.0 + qps / 1000}  # noqa: E731
    search = _search(monkeypatch, slow, start_qps=200.0)
    assert search.best is None and len(search.points) == 2  # 200, then 50, then it stops
    assert "TPOT p99 stays over its 30 ms limit whatever the load" in search.note
    assert "no target QPS helps" in search.note


def test_tune_prints_the_broken_limit_in_words(dataset: Path, runs_dir: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(server_mod, "probe", _scripted(_tpot_bound))
    monkeypatch.setattr(latency_mod, "probe", _scripted(_tpot_bound))
    code = main(["tune", "-b", "llama3.1-8b", "-s", "Interactive", "--confirm", "0",
                 "--dataset", str(dataset), "--backend", "stream_backends:TimedStream",
                 "--no-progress", "--output-dir", str(runs_dir)])
    out, err = capsys.readouterr()
    assert code == 0
    text = " ".join((out + err).split())  # rich wraps long lines
    assert "TPOT p99" in text and "over its 30 ms limit (streams share the server's decode " \
        "steps)" in text
    assert "TTFT p99 20/500 ms" in text and "Interactive: the edge above" in text
    monkeypatch.setattr(server_mod, "probe", _scripted(lambda q: {"ttft": 900.0, "tpot": 5.0}))
    code = main(["tune", "-b", "llama3.1-8b", "-s", "Interactive", "--confirm", "0",
                 "--dataset", str(dataset), "--backend", "stream_backends:TimedStream",
                 "--no-progress", "--output-dir", str(runs_dir)])
    text = " ".join(capsys.readouterr().out.split())
    assert code == 1
    assert "no VALID point found for Interactive: TTFT p99 stays over its 500 ms limit " \
        "whatever the load" in text


# ---- real probes: the TimedStream server with a TPOT that grows with the streams in flight -------

LOADED = {"ttft_s": 0.005, "gap_s": 0.002, "gap_per_stream_s": 0.001, "n_tokens": 4}


def _poisson_p99(mean: float) -> int:
    k, term, total = 0, math.exp(-mean), math.exp(-mean)
    while total < 0.99:
        k += 1
        term *= mean / k
        total += term
    return k


def analytic_tpot_edge(ttft_s: float, gap_s: float, gap_per_stream_s: float, n_tokens: int,
                       limit_ms: float) -> float:
    """The rate where TPOT p99 meets ``limit_ms``: streams in flight are Poisson (M/G/inf) with
    mean m = rate x stream time, stream time = ttft + (n - 1) x (gap + per_stream x (m + 1));
    a stream starting with N in flight (itself included) has TPOT gap + per_stream x N."""
    def tpot_p99_ms(rate: float) -> float:
        gaps = n_tokens - 1
        m = rate * (ttft_s + gaps * (gap_s + gap_per_stream_s)) / (
            1 - rate * gaps * gap_per_stream_s)
        return 1000 * (gap_s + gap_per_stream_s * (1 + _poisson_p99(m)))

    lo, hi = 1.0, 1 / ((n_tokens - 1) * gap_per_stream_s) * 0.999
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tpot_p99_ms(mid) <= limit_ms else (lo, mid)
    return lo


@pytest.mark.slow
def test_interactive_search_finds_the_tpot_edge_of_a_loaded_server(dataset: Path,
                                                                    runs_dir: Path) -> None:
    edge = analytic_tpot_edge(**LOADED, limit_ms=INTERACTIVE_TPOT_MS)  # ~255 QPS
    spec = RunSpec(benchmark="llama3.1-8b", scenario="Interactive", dataset=dataset,
                   backend="stream_backends:TimedStream", backend_option=dict(LOADED),
                   output_dir=runs_dir)
    search = search_server_qps(spec, start_qps=edge / 2, precision=1.3, probe_ms=500,
                               recheck_invalid=False)
    best = search.best
    assert best is not None and best.scenario == "Interactive"
    assert 0.6 * edge <= best.target <= 1.5 * edge, (best.target, edge)
    # a probe's value is samples/s (the unit of its target), its metric tokens/s beside it
    assert best.tokens_per_s is not None and best.value is not None
    assert best.tokens_per_s == pytest.approx(LOADED["n_tokens"] * best.value, rel=0.05)
    assert best.tpot_p99_ms is not None and best.tpot_p99_ms <= INTERACTIVE_TPOT_MS
    assert best.tpot_limit_ms == INTERACTIVE_TPOT_MS and best.ttft_limit_ms == INTERACTIVE_TTFT_MS
    above = [p for p in search.points if p.target > best.target]
    assert above and all(not p.valid for p in above)
    assert any("TPOT" in p.over_limits() for p in above)
    for p in search.points:  # every probe issued the 460 queries token early stopping needs
        user_conf = (Path(p.run_dir) / "user.conf").read_text()  # (or more: a re-check)
        found = re.search(r"^llama3_1-8b-interactive\.Server\.min_query_count = (\d+)$",
                          user_conf, re.MULTILINE)
        assert found and int(found.group(1)) >= 460, user_conf


@pytest.mark.slow
def test_run_interactive_with_target_qps_auto(dataset: Path, runs_dir: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    # a faster server than above (edge ~600 QPS): the quick search and the run stay short
    options = {"ttft_s": 0.001, "gap_s": 0.001, "gap_per_stream_s": 0.0005, "n_tokens": 4}
    code = main(["run", "-b", "llama3.1-8b", "-s", "Interactive", "--target-qps", "auto",
                 "--dataset", str(dataset), "--backend", "stream_backends:TimedStream",
                 *[a for k, v in options.items() for a in ("--backend-option", f"{k}={v}")],
                 "--no-progress", "--output-dir", str(runs_dir)])
    out, err = capsys.readouterr()
    # VALID is LoadGen's word on this machine's timing: a stall may fail early stopping
    assert code in (0, 1), out + err
    assert "measuring the Interactive target" in out + err
    [run] = list((runs_dir / "llama3.1-8b").iterdir())
    assert run.name.startswith("Interactive-performance-")
    data = json.loads((run / "run.json").read_text())
    assert data["settings"]["sources"]["target_qps"] == "measured"
    edge = analytic_tpot_edge(**options, limit_ms=INTERACTIVE_TPOT_MS)
    assert 0 < data["settings"]["values"]["target_qps"] <= edge
    assert data["result"]["tokens_ms"]["tpot_limit_ms"] == INTERACTIVE_TPOT_MS
    probes = list((runs_dir / "_tune" / "llama3.1-8b").iterdir())
    assert any(p.name.startswith("Interactive-") for p in probes)
