"""The LLM path as a submitter walks it (issue 46), against the scripted OpenAI-compatible server
of llm_server.py: compliance re-runs an openai run from its run.json; a text server's first
token is the answer's first; chat sends the reference's messages and run.json says which form
went out; scoring needs are checked before the first request and `mlharness score` re-scores a
kept log; the concurrency the backend keeps (given, paced, measured) and the stall guard of a
request queued at a busy server; short --test LLM runs; refusals that name the option; line
progress; submit's system type and verifications found by their path."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import llm_fixtures as fx
import pytest
from catalogue_support import run_cli
from llm_server import Script, ScriptedServer

from mlharness.backends import openai_admit
from mlharness.backends.openai_admit import Admission
from mlharness.backends.openai_sse import EndpointError
from mlharness.backends.openai_stream import (Activity, ClientSettings, OpenAIStreamClient,
                                              TextTokenizer, _StallGuard, refusal_hint)
from mlharness.cli import render
from mlharness.llm import datasets
from mlharness.loadgen.settings import TestConfig, effective_settings
from mlharness.submission.runs import _named_by_path
from mlharness.submission.system import system_type_for

SERVED = "served-m"


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("submitter")
    return fx.summary_case(tmp, 6)


def _run(case, out: Path, capsys, url: str, *args: str):
    return run_cli(["run", "-b", "llama3.1-8b", "--backend", "openai", "--endpoint", url,
                    "--backend-option", f"served_model={SERVED}", "--dataset", case["dataset"],
                    "--output-dir", out, "--no-progress", *args], capsys)


def _records(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.rglob("run.json"))]


# ---- 1. compliance re-runs an openai run from its run.json ---------------------------------------

def test_compliance_reruns_an_openai_run_and_endpoint_replaces_its_servers(case, tmp_path,
                                                                          capsys):
    fast = Script(ttft_s=0.005, gap_s=0.001, n_tokens=4)
    with ScriptedServer(fast) as first, ScriptedServer(fast) as second:
        ran = _run(case, tmp_path / "runs", capsys, first.url, "-s", "Offline",
                   "--target-qps", "200")
        assert ran.code in (0, 1), ran.err
        [record] = _records(tmp_path / "runs")
        assert record["spec"]["backend_option"]["endpoints"] == [first.url]  # kept a list
        ref = next((tmp_path / "runs" / "llama3.1-8b").glob("Offline-performance-*"))
        before = len(first.seen)
        audit = run_cli(["compliance", "--no-progress", "--json", "--reference-perf", ref,
                         "--output", tmp_path / "out", "--output-dir", tmp_path / "runs",
                         "--endpoint", second.url], capsys)
        assert audit.code == 0, audit.err
        [verdict] = json.loads(audit.out)
        assert verdict["test"] == "TEST06" and verdict["passed"]
        assert len(second.seen) >= 100 and len(first.seen) == before  # --endpoint won
        # without --endpoint the reference's server (a list in run.json) is used again
        again = run_cli(["compliance", "--no-progress", "--json", "--reference-perf", ref,
                         "--output", tmp_path / "out2", "--output-dir", tmp_path / "runs"],
                        capsys)
        assert again.code == 0, again.err
        assert len(first.seen) >= before + 100


# ---- 2. the first token of a server that streams text -----------------------------------------

class _Words(TextTokenizer):
    """A byte-level-BPE-like tokenizer: a word takes the space before it (" tree"), trailing
    spaces are a token of their own ("A " is "A", " "), as GPT-2's pre-tokenizer splits."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}

    def encode(self, text: str) -> list[int]:
        return [self.vocab.setdefault(p, len(self.vocab))
                for p in re.findall(r" ?[^ ]+| +(?! *[^ ])| +", text)]

    def decode(self, ids: list[int]) -> str:
        words = {i: w for w, i in self.vocab.items()}
        return "".join(words[i] for i in ids)


def test_the_answer_begins_with_the_first_token_reported():
    words = _Words()
    first = words("A ")[:1]  # what the client reports at the first chunk: one id, "A"
    assert words("A ") == [0, 1] and words("A tree") == [0, 2]  # the chunk alone differs ...
    assert words.answer("A tree", first)[:1] == first  # ... the answer starts as reported
    # a first chunk cut inside a word ("Hel" of "Hello"): the answer is spliced so it begins
    # with what was reported, and decodes to the same text
    hel = words("Hel")
    assert words("Hello there")[:1] != hel
    spliced = words.answer("Hello there", hel)
    assert spliced[:1] == hel and words.decode(spliced) == "Hello there"


def test_a_text_server_reports_one_first_id_that_begins_the_answer():
    words = _Words()
    firsts = []
    with ScriptedServer(Script(ttft_s=0.01, gap_s=0.001, n_tokens=5, token_ids=False)) as srv:
        client = OpenAIStreamClient(ClientSettings(base_url=srv.url, model=SERVED,
                                                   token_ids=False))
        result = asyncio.run(client.complete([1, 2], 5, chat=False, tokenize=words,
                                             on_first_token=lambda ids, t: firsts.append(ids)))
    assert result.text == " t0 t1 t2 t3 t4".replace("t", "t10")  # " t100 t101 ..."
    assert firsts == [result.token_ids[:1]] and len(firsts[0]) == 1


# ---- 3. chat: the reference's messages, and run.json says which form went out -----------------

def test_chat_sends_the_prompt_tok_input_encodes_with_the_reference_template(case, tmp_path,
                                                                             capsys):
    ds = datasets.read("llama3.1-8b", case["dataset"])
    with ScriptedServer(Script(ttft_s=0.005, gap_s=0.001, n_tokens=3, first_id=5)) as server:
        ran = _run(case, tmp_path / "chat", capsys, server.url, "-s", "Offline", "--mode",
                   "accuracy", "--backend-option", "chat=true", "--task-option",
                   f"tokenizer={case['tokdir']}")
        assert ran.code in (0, 1), ran.err
        bodies = [s.body for s in server.seen]
        assert all(s.path == "/v1/chat/completions" for s in server.seen)
        prompts = sorted(b["messages"][0]["content"] for b in bodies)
        assert prompts == sorted(s.prompt for s in ds.samples)  # the instruction filled in
        assert all(p.startswith("Summarize: ") for p in prompts)
        assert all(b["chat_template"].startswith("{{- bos_token }}") for b in bodies)
        [record] = _records(tmp_path / "chat")
        assert record["backend"]["prompt"] == ("the reference's chat messages to "
                                               "/v1/chat/completions, with the benchmark's "
                                               "reference chat template")
        # without extensions the server's own template: no chat_template key
        server.seen.clear()
        ran = _run(case, tmp_path / "plain", capsys, server.url, "-s", "Offline", "--mode",
                   "accuracy", "--backend-option", "chat=true", "--backend-option",
                   "extensions=false", "--backend-option", f"tokenizer={case['tokdir']}")
        assert ran.code in (0, 1), ran.err
        assert server.seen and not any("chat_template" in s.body for s in server.seen)
        [record] = _records(tmp_path / "plain")
        assert record["backend"]["prompt"].endswith("with the server's chat template")
    # and without chat: the token ids, to /v1/completions
    with ScriptedServer(Script(ttft_s=0.005, gap_s=0.001, n_tokens=3, first_id=5)) as server:
        ran = _run(case, tmp_path / "ids", capsys, server.url, "-s", "Offline", "--mode",
                   "accuracy", "--task-option", f"tokenizer={case['tokdir']}")
        assert sorted(s.body["prompt"] for s in server.seen) == sorted(
            s.input_ids for s in ds.samples)
        assert _records(tmp_path / "ids")[0]["backend"]["prompt"] == \
            "token ids to /v1/completions"


def test_the_chat_forms_of_the_other_data_sets(tmp_path):
    import pandas as pd

    orca = tmp_path / "orca.pkl"
    pd.DataFrame({"input": ["<s>[INST] q [/INST]"], "tok_input": [[1, 2]], "output": ["a"],
                  "system_prompt": ["be brief"], "question": ["q"]}).to_pickle(orca)
    [sample] = datasets.read("llama2-70b-99.9", orca).samples
    assert sample.messages == [{"role": "system", "content": "be brief"},
                               {"role": "user", "content": "q"}]
    r1 = tmp_path / "r1.pkl"
    pd.DataFrame({"text_input": ["p"], "ground_truth": ["A"], "dataset": ["gpqa"]}).to_pickle(r1)
    assert datasets.read("deepseek-r1", r1).samples[0].messages == [
        {"role": "user", "content": "p"}]


def test_chat_with_a_data_set_of_token_ids_only_is_refused_before_anything_is_sent(tmp_path,
                                                                                   capsys):
    import pandas as pd

    oss = tmp_path / "gpt_oss.pkl"
    pd.DataFrame({"tok_input": [[5, 6, 7]], "dataset": ["aime25"],
                  "ground_truth": ["12"]}).to_pickle(oss)
    with ScriptedServer(Script(ttft_s=0.005, gap_s=0.001, n_tokens=3)) as server:
        ran = run_cli(["run", "-b", "gpt-oss-120b", "--backend", "openai", "--endpoint",
                       server.url, "--backend-option", f"served_model={SERVED}",
                       "--backend-option", "chat=true", "--dataset", oss, "-s", "Offline",
                       "--target-qps", "5", "--output-dir", tmp_path / "runs",
                       "--no-progress"], capsys)
        assert ran.code == 2 and "token ids only" in ran.err and not server.seen


# ---- 4. scoring needs before the run; `mlharness score` ----------------------------------------

def test_an_accuracy_run_without_a_tokenizer_is_refused_before_any_request(case, tmp_path,
                                                                            capsys):
    with ScriptedServer(Script(ttft_s=0.005, gap_s=0.001, n_tokens=3)) as server:
        ran = _run(case, tmp_path / "none", capsys, server.url, "-s", "Offline", "--mode",
                   "accuracy")
        assert ran.code == 2 and "needs the model's tokenizer" in ran.err
        assert "nothing has been sent yet" in ran.err and not server.seen
        assert not (tmp_path / "none").exists() or not _records(tmp_path / "none")


def test_the_backends_tokenizer_scores_and_score_rescores_the_kept_log(case, tmp_path, capsys):
    with ScriptedServer(Script(ttft_s=0.005, gap_s=0.001, n_tokens=3,
                               token_ids=False)) as server:
        ran = _run(case, tmp_path / "runs", capsys, server.url, "-s", "Offline", "--mode",
                   "accuracy", "--backend-option", "extensions=false", "--backend-option",
                   f"tokenizer={case['tokdir']}")
    assert ran.code in (0, 1), ran.err
    [record] = _records(tmp_path / "runs")
    assert record["accuracy"]["metric"] == "ROUGE1"  # scored with the backend's tokenizer
    run_dir = next((tmp_path / "runs" / "llama3.1-8b").glob("Offline-accuracy-*"))
    (run_dir / "accuracy.txt").unlink()
    again = run_cli(["score", run_dir, "--json"], capsys)
    assert again.code in (0, 1), again.err
    scored = json.loads(again.out)
    assert scored["accuracy"]["value"] == record["accuracy"]["value"]
    assert (run_dir / "accuracy.txt").read_text().strip() == record["accuracy"]["text"]
    # a performance run has nothing to score; a directory without run.json is no run
    with ScriptedServer(Script(ttft_s=0.005, gap_s=0.001, n_tokens=3)) as server:
        _run(case, tmp_path / "perf", capsys, server.url, "-s", "Offline", "--target-qps", "50")
    perf = next((tmp_path / "perf").rglob("run.json")).parent
    refused = run_cli(["score", perf], capsys)
    assert refused.code == 2 and "performance run" in refused.err
    assert run_cli(["score", tmp_path], capsys).code == 2


def test_a_scoring_failure_is_recorded_and_score_makes_the_run_ok(case, tmp_path, capsys,
                                                                  monkeypatch):
    from mlharness.tasks import text_generation

    with ScriptedServer(Script(ttft_s=0.005, gap_s=0.001, n_tokens=3, first_id=5)) as server:
        monkeypatch.setitem(text_generation.SCORERS, "cnn_dailymail", _broken)
        ran = _run(case, tmp_path / "runs", capsys, server.url, "-s", "Offline", "--mode",
                   "accuracy", "--task-option", f"tokenizer={case['tokdir']}")
        monkeypatch.undo()
    assert ran.code == 3
    [record] = _records(tmp_path / "runs")
    assert record["status"] == "failed" and record["error"]["phase"] == "scoring"
    run_dir = next((tmp_path / "runs").rglob("run.json")).parent
    fixed = run_cli(["score", run_dir], capsys)
    assert fixed.code in (0, 1) and "ROUGE1" in fixed.out, fixed.err
    [record] = _records(tmp_path / "runs")
    assert record["status"] == "ok" and record["accuracy"]["metric"] == "ROUGE1"


def _broken(*args, **kwargs):
    raise RuntimeError("a scorer bug")


# ---- 5. how many requests in flight; a request queued at a busy server ------------------------

def test_auto_concurrency_grows_while_the_servers_stream_more_and_settles_at_the_knee():
    async def go(rate_at) -> Admission:
        admission = Admission(None, 64)
        held = [asyncio.ensure_future(admission.acquire()) for _ in range(200)]
        await asyncio.sleep(0)
        assert admission.in_flight == 1  # the first goes alone ...
        admission.open()  # ... until its answer begins
        await asyncio.sleep(0)
        now = events = firsts = 0.0
        while admission.settled is None and now < 600:
            now += 0.25
            firsts += admission.limit  # every admitted request has begun streaming
            events += rate_at(admission.limit) * 0.25
            admission.observe(now, int(events), int(firsts))
            await asyncio.sleep(0)
        for task in held:
            task.cancel()
        return admission

    plateau = asyncio.run(go(lambda limit: 100.0 * min(limit, 8)))  # a CPU server: 8 at most
    assert plateau.settled == 8 and [lv["limit"] for lv in plateau.levels] == [8, 16]
    batching = asyncio.run(go(lambda limit: 100.0 * limit))  # a batching server: the ceiling
    assert batching.settled == 64 and batching.report()["mode"] == "measured"


def test_paced_queries_go_out_as_they_come_and_a_given_limit_holds():
    async def go() -> tuple[int, int]:
        paced = Admission(None, 32)
        paced.open()
        paced.pace(32, "max_concurrency (no target QPS)")
        given = Admission(3, 32)
        given.open()
        tasks = [asyncio.ensure_future(a.acquire()) for a in (paced, given) for _ in range(40)]
        await asyncio.sleep(0)
        for t in tasks:
            t.cancel()
        return paced.in_flight, given.in_flight

    assert asyncio.run(go()) == (40, 3)  # paced: no client limit at all (the cap: 32)


def test_a_request_queued_at_a_server_that_streams_others_is_not_stalled():
    async def go() -> list[bool]:
        server = Activity()
        loop = asyncio.get_running_loop()
        waiting = asyncio.ensure_future(asyncio.sleep(0.6))
        queued = _StallGuard(0.2, server)
        queued._task = waiting  # the guard cancels this request when it stalls
        for _ in range(5):  # the server streams other requests
            await asyncio.sleep(0.1)
            server.last = loop.time()
        alive = not waiting.cancelled()
        queued.what = "streaming"  # its own answer began: its own clock from now on
        queued.touch()
        await asyncio.sleep(0.35)
        stalled = waiting.cancelled() or queued.expired()
        queued.stop()
        waiting.cancel()
        return [alive, stalled]

    assert asyncio.run(go()) == [True, True]


def test_the_search_constants_are_sane():
    assert openai_admit.START >= 1 and openai_admit.GAIN > 1


# ---- 11. short --test LLM runs -------------------------------------------------------------------

@pytest.mark.parametrize(("scenario", "model", "samples"), [
    ("Offline", "llama3_1-8b", 100), ("Server", "llama3_1-8b", 460),
    ("Server", "llama3_1-8b-interactive", 460)])
def test_a_test_llm_run_loads_a_short_sample_set(scenario, model, samples):
    short = effective_settings(TestConfig(model, scenario))
    assert short.values["performance_sample_count_override"] == samples
    assert short.sources["performance_sample_count_override"] == "test-run"
    full = effective_settings(TestConfig(model, scenario, short=False))
    assert full.values["performance_sample_count_override"] == 13368
    accuracy = effective_settings(TestConfig(model, scenario, mode="accuracy"))
    assert accuracy.sources["performance_sample_count_override"] == "mlperf.conf"
    small = effective_settings(TestConfig(model, scenario, dataset_samples=8))
    assert small.sources["performance_sample_count_override"] == "mlperf.conf"  # short already
    other = effective_settings(TestConfig("resnet50", scenario))
    assert other.sources.get("performance_sample_count_override") != "test-run"


# ---- 10. refusals name the option that fixes them -----------------------------------------------

@pytest.mark.parametrize(("status", "said", "chat", "sent", "fix"), [
    (422, "Unexpected keys in the request: {'return_token_ids'}", True,
     {"return_token_ids"}, "extensions=false"),
    (404, '{"detail":"Not Found"}', False, set(), "chat=true"),
    (404, "The model `x` does not exist.", False, set(), "served_model=NAME"),
    (500, "Internal Server Error", True, set(), "served_model="),
    (400, "Chat template is passed with request, but --trust-request-chat-template is not set",
     True, {"chat_template"}, "chat_template=false"),
])
def test_a_refusal_names_the_option_that_fixes_it(status, said, chat, sent, fix):
    error = EndpointError(f"http://h:1 answered HTTP {status}: {said}", "see the log", status,
                          said)
    assert fix in refusal_hint(error, "x", chat, sent, "http://h:1")


# ---- 6. progress lines when stderr is not a terminal --------------------------------------------

def test_progress_is_a_line_now_and_then_in_a_log(monkeypatch, capsys):
    from mlharness.runner.execute import RunProgress

    monkeypatch.setattr(render, "LINE_EVERY_S", 0.0)
    with render.LiveProgress(enabled=True, lines=True) as bar:
        bar(RunProgress("run", 12, None, 30.0, 60.0, label="Interactive performance"))
    assert "progress: Interactive performance: 12 done, 30 s of ~60 s" in capsys.readouterr().err
    monkeypatch.setattr(render, "LINE_EVERY_S", 3600.0)
    with render.LiveProgress(enabled=True, lines=True) as bar:
        bar(RunProgress("run", 12, None, 30.0, label="quiet"))
    assert "quiet" not in capsys.readouterr().err  # a short step prints nothing


# ---- 8. submit: the system type, and verifications found by their path ------------------------

def test_the_system_type_is_the_suite_that_holds_the_benchmarks():
    assert system_type_for({"llama3.1-8b": ["datacenter", "datacenter,edge"]}) == "datacenter"
    assert system_type_for({"resnet": ["edge", "datacenter,edge"]}) == "edge"
    assert system_type_for({"resnet": ["edge", "datacenter,edge"],
                            "llama3.1-8b": ["datacenter", "datacenter,edge"]}) == \
        "datacenter,edge"
    assert system_type_for({"a": ["edge"], "b": ["datacenter"]}) is None


def test_a_verification_is_placed_by_its_path(tmp_path):
    test_dir = tmp_path / "compliance" / "llama3.1-8b" / "Offline" / "TEST06"
    assert _named_by_path(test_dir, {"llama3.1-8b"}) == ("llama3.1-8b", "Offline")
    assert _named_by_path(test_dir, {"resnet50"}) is None
    assert _named_by_path(tmp_path / "x" / "TEST06", {"llama3.1-8b"}) is None
