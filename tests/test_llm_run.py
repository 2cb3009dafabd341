"""LLM runs end to end through the real LoadGen: the streaming SUT, token metrics, the
Interactive scenario, accuracy equal to the official evaluation, failures and refusals.

The backend is ``stream_backends:TimedStream`` (injected TTFT and per-token gap on one timer
thread); the OpenAI-compatible path against a scripted server is in test_llm_endpoint.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import llm_fixtures as fx
import pytest
import referee
from catalogue_support import assert_clean_error, run_cli

from mlharness.llm import sentences
from mlharness import rules
from mlharness.spec import RunSpec
from timing_support import Lateness

N = 12
TTFT_S, GAP_S, TOKENS = 0.2, 0.02, 8


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("llmrun")
    case = fx.summary_case(tmp, N)
    dataset, encode, preds, tokdir = case["dataset"], case["encode"], case["preds"], case["tokdir"]
    records = json.loads(dataset.read_text())
    answers = [[r["tok_input"], encode(p) + [fx.EOS]] for r, p in zip(records, preds)]
    outputs = tmp / "outputs.json"
    outputs.write_text(json.dumps(answers))
    return {"tmp": tmp, "dataset": dataset, "tokdir": tokdir, "outputs": outputs}


def _run(fixture, out: Path, capsys, *args: str, ttft: float = TTFT_S, gap: float = GAP_S):
    return run_cli(["run", "-b", "llama3.1-8b", "--backend", "stream_backends:TimedStream",
                    "--dataset", fixture["dataset"], "--output-dir", out,
                    "--backend-option", f"ttft_s={ttft}", "--backend-option", f"gap_s={gap}",
                    "--backend-option", f"n_tokens={TOKENS}", *args], capsys)


def _record(out: Path, scenario: str) -> dict:
    found = sorted((out / "llama3.1-8b").glob(f"{scenario}-*/run.json"))
    assert found, list(out.rglob("*"))
    return json.loads(found[-1].read_text())


@pytest.mark.parametrize("scenario", ["Server", "Interactive"])
def test_token_latencies_are_measured_and_judged(fixture, tmp_path, capsys, scenario):
    with Lateness() as noise:
        result = _run(fixture, tmp_path, capsys, "-s", scenario, "--target-qps", "120")
    record = _record(tmp_path, scenario)
    res = record["result"]
    assert res["metric"] == "result_completed_tokens_per_second", res
    assert res["unit"] == "completed tokens/s"
    tokens = res["tokens_ms"]
    limits = rules.load("v6.1").benchmark("llama3.1-8b").token_limit(scenario)
    assert tokens["ttft_limit_ms"] == limits.ttft_ns / 1e6
    assert tokens["tpot_limit_ms"] == limits.tpot_ns / 1e6
    # the injected latencies: never below them (means within 15 %); on a quiet machine (the
    # scheduling noise measured beside the run) means within 15 % and p99s within 50 % above.
    # A loaded one delays the backend's own timers (TTFT p99 357 ms for 200 injected beside a
    # second suite): no upper bound there (test_llm_endpoint.py holds p99 to what a server sent)
    assert tokens["ttft_mean_ms"] >= TTFT_S * 1e3 * 0.85, tokens
    assert tokens["tpot_mean_ms"] >= GAP_S * 1e3 * 0.85, tokens
    assert tokens["ttft_p99_ms"] >= TTFT_S * 1e3, tokens
    assert tokens["tpot_p99_ms"] >= GAP_S * 1e3 * 0.85, tokens
    if noise.quiet:
        assert tokens["ttft_mean_ms"] == pytest.approx(TTFT_S * 1e3, rel=0.15), tokens
        assert tokens["tpot_mean_ms"] == pytest.approx(GAP_S * 1e3, rel=0.15), tokens
        assert tokens["ttft_p99_ms"] < TTFT_S * 1e3 * 1.5, (tokens, noise.p99_ms)
        assert tokens["tpot_p99_ms"] < GAP_S * 1e3 * 1.5, (tokens, noise.p99_ms)
    assert res["value"] > 0
    # Interactive runs as LoadGen's Server under the model's interactive key
    model = "llama3_1-8b-interactive" if scenario == "Interactive" else "llama3_1-8b"
    user_conf = next((tmp_path / "llama3.1-8b").glob(f"{scenario}-*/user.conf")).read_text()
    assert f"{model}.Server.target_qps = 120" in user_conf
    assert f"{model}.Server.min_query_count = 460" in user_conf  # early stopping on TTFT/TPOT
    assert record["spec"]["scenario"] == scenario
    # 460 queries at 120 QPS under these limits: VALID (TTFT 200 < 500 ms, TPOT 20 < 30 ms)
    assert res["valid"] is True, res["reasons"]
    assert result.code == 0, result.err
    assert "TTFT" in result.out and "tok/s done" in result.out


def test_an_interactive_run_over_its_tpot_limit_says_which_and_what_to_do(fixture, tmp_path,
                                                                        capsys):
    result = _run(fixture, tmp_path, capsys, "-s", "Interactive", "--target-qps", "120",
                  gap=0.045)
    res = _record(tmp_path, "Interactive")["result"]
    assert res["valid"] is False
    assert result.code == 1
    reason = " ".join(res["reasons"])
    said = re.search(r"TPOT p99 (\d+\.\d) ms is over the 30 ms limit: lower --target-qps", reason)
    # the scripted 45 ms gap; a loaded machine only adds to it (50.8 ms beside two suites)
    assert said and float(said.group(1)) >= 45 * 0.85, reason
    assert "TTFT p99" not in reason  # 200 ms is within Interactive's 500 ms


def test_offline_reports_tokens_per_second(fixture, tmp_path, capsys):
    # a server of 8 slots: 8 / 0.34 s = 23.5 samples/s, so 110 samples take ~4.7 s (> 2 s)
    result = _run(fixture, tmp_path, capsys, "-s", "Offline", "--target-qps", "50",
                  "--backend-option", "max_streams=8")
    res = _record(tmp_path, "Offline")["result"]
    assert result.code == 0, result.err
    assert (res["metric"], res["unit"]) == ("result_tokens_per_second", "tokens/s")
    assert res["valid"] is True and res["value"] > 0


def test_accuracy_equals_the_official_evaluation(fixture, tmp_path, capsys, monkeypatch):
    result = _run(fixture, tmp_path, capsys, "-s", "Offline", "--mode", "accuracy",
                  "--task-option", f"tokenizer={fixture['tokdir']}", "--backend-option",
                  f"outputs={fixture['outputs']}", ttft=0.01, gap=0.001)
    run_dir = next((tmp_path / "llama3.1-8b").glob("Offline-accuracy-*"))
    record = json.loads((run_dir / "run.json").read_text())
    ours = record["accuracy"]["details"]["metrics"]
    assert 0 < ours["ROUGE1"] < 100
    # FAIL: 12 samples of 13,368 cannot reach the generated-length target; the reason says so
    assert record["accuracy"]["passed"] is False and result.code == 1
    assert "12 of the 13368 samples scored" in " ".join(record["accuracy"]["failures"])
    # accuracy.txt reads back through the checker's patterns
    parsed = rules.load("v6.1").benchmark("llama3.1-8b").parse_accuracy(
        (run_dir / "accuracy.txt").read_text())
    assert parsed == pytest.approx(ours)

    # the official evaluation.py on the log LoadGen wrote (int32 ids, as every reference SUT)
    referee.require("language/llama3.1-8b/evaluation.py", python=True)
    nltk_data = tmp_path / "nltk_data"
    sentences.write_punkt_tab(nltk_data)
    monkeypatch.setenv("NLTK_DATA", str(nltk_data))
    proc = referee.python(str(Path(__file__).parent / "llm_referee_run.py"),
                          str(referee.INFERENCE / "language/llama3.1-8b/evaluation.py"),
                          "--mlperf-accuracy-file", str(run_dir / "mlperf_log_accuracy.json"),
                          "--dataset-file", str(fixture["dataset"]), "--model-name",
                          str(fixture["tokdir"]), "--total-sample-count", str(N),
                          "--dtype", "int32", cwd=tmp_path)
    line = proc.stdout.strip().splitlines()[-1]
    for key, name in (("rouge1", "ROUGE1"), ("rouge2", "ROUGE2"), ("rougeL", "ROUGEL"),
                      ("rougeLsum", "ROUGELSUM"), ("gen_len", "GEN_LEN")):
        m = re.search(rf"'{key}': (?:np\.\w+\()?'?([\d.]+)", line)
        assert m, (key, line)
        assert ours[name] == pytest.approx(float(m.group(1)), abs=1e-6), key


def test_a_backend_failure_ends_the_run_with_exit_3_and_keeps_the_logs(fixture, tmp_path,
                                                                      capsys):
    result = _run(fixture, tmp_path, capsys, "-s", "Server", "--target-qps", "120",
                  "--backend-option", "fail_at=20", ttft=0.01, gap=0.001)
    record = _record(tmp_path, "Server")
    assert result.code == 3, result.err
    assert record["status"] == "failed"
    assert "scripted failure of request 20" in record["error"]["message"]
    assert (next((tmp_path / "llama3.1-8b").glob("Server-*")) / "mlperf_log_detail.txt").is_file()
    assert "Traceback" not in result.err


@pytest.mark.parametrize("argv, fragment", [
    (["-b", "llama3.1-8b", "--backend", "onnxruntime"], "generates text"),
    (["-b", "demo", "--backend", "hf"], "generates text"),
    (["-b", "demo", "-s", "Interactive"], "no Interactive scenario"),
    (["-b", "llama3.1-8b", "--backend", "stream_backends:TimedStream"], "needs its dataset"),
])
def test_mismatches_are_refused_before_anything_runs(tmp_path, capsys, argv, fragment, fixture):
    if "demo" not in argv and "--backend" in argv and argv[-1] == "onnxruntime":
        argv = [*argv, "--dataset", str(fixture["dataset"])]
    result = run_cli(["run", *argv, "--output-dir", tmp_path], capsys)
    assert_clean_error(result, 2, fragment)
    assert not list(tmp_path.rglob("run.json"))


def test_endpoints_of_the_openai_backend_are_its_servers():
    spec = RunSpec.from_mapping({"benchmark": "llama3.1-8b", "backend": "openai",
                                 "distribution": {"endpoints": ["http://h:1", "http://h:2"],
                                                  "failover": True}})
    assert spec.distribution.local
    assert spec.backend_option == {"endpoints": ["http://h:1", "http://h:2"], "failover": True}


@pytest.mark.parametrize("scenario", ["Offline", "Server", "Interactive"])
def test_a_valid_llm_run_passes_the_preflight_of_its_round(scenario):
    from mlharness import rules

    spec = RunSpec.from_mapping({"benchmark": "llama3.1-8b", "scenario": scenario, "valid": True,
                                 "target_qps": 10, "backend": "openai",
                                 "distribution": {"endpoints": ["http://h:1"]}})
    assert rules.preflight(spec, seeds=lambda: rules.load().seeds) == []
    short = spec.replace(valid=False)
    # a --test LLM run loads a short sample set too (performance_sample_count, "test-run")
    assert [p.code for p in rules.preflight(short, seeds=lambda: rules.load().seeds)] == [
        "test-duration", "performance-sample-count"]
