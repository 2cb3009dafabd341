"""A real OpenAI-compatible server: ``transformers serve`` (transformers' FastAPI/uvicorn server)
on a tiny random-weight Llama built here (config, weights and tokenizer made in the test,
nothing downloaded, HF offline), streamed through ``OpenAIStreamClient`` and, end to end, by
``mlharness run --backend openai`` through a logging proxy of the test's own
(``llm_proxy.LoggingProxy``): what went over the wire is the truth the runs are held to. An
accuracy run in chat mode sends the reference's chat messages and logs the model's greedy
answers, each as many tokens as the server's text holds; an Interactive run's TTFT and TPOT are
the proxy's, and its TEST06 audit passes (the first token reported is the answer's first).

What ``transformers serve`` (4.57) is, as this test found it: ``/v1/chat/completions`` only (no
``/v1/completions``), text only (no token ids), no ``data: [DONE]`` at the end, HTTP 422 on any
key OpenAI's schema lacks (so the client gets ``token_ids=False``, the openai backend
``extensions=false``: no ``return_token_ids``, ``min_tokens``, ``top_k``), ``device_map="auto"``
always (needs ``accelerate``), and it imports the ``openai`` package's types at start-up. Text
is released by transformers' ``TextIteratorStreamer`` a word at a time, so a chunk is not always
one token; the ids come from tokenizing the text with the model's tokenizer.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import hf_fixtures
import llm_fixtures

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
# transformers[serving]: the server refuses to start without them (dev extra, pyproject.toml)
pytest.importorskip("openai", minversion="1.98")
pytest.importorskip("accelerate")

from mlharness.backends.openai_stream import ClientSettings, OpenAIStreamClient  # noqa: E402
from llm_proxy import LoggingProxy  # noqa: E402

pytestmark = pytest.mark.slow  # the server's start (torch, transformers) takes ~20 s on 2 cores

MAX_TOKENS = 12
PROMPT = "the cat sat on the mat"
#: a word for every id of the model (the fixture's tokenizer names only 26 of its 300), so the
#: random model's every output token decodes to text
FILLER = [f"w{i}" for i in range(hf_fixtures.VOCAB - len(hf_fixtures.SPECIALS)
                                 - len(hf_fixtures.WORDS))]
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def _model_dir(directory: Path) -> Path:
    """The tiny Llama with a whole-vocabulary word tokenizer and a plain chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    transformers = hf_fixtures.import_transformers()
    hf_fixtures.tiny_llama(directory, tokenizer=False)
    words = hf_fixtures.SPECIALS + list(hf_fixtures.WORDS) + FILLER
    raw = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    raw.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", hf_fixtures.BOS)])
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=raw, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
        # no token_type_ids: generate() refuses them for a Llama
        model_input_names=["input_ids", "attention_mask"], chat_template=CHAT_TEMPLATE)
    fast.save_pretrained(directory)
    return directory


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("serve")
    model = _model_dir(root / "tiny-llama")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_HOME": str(root / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    log = (root / "server.log").open("w")

    def start() -> tuple[subprocess.Popen, str]:
        port = _free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "transformers.commands.transformers_cli", "serve",
             "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--dtype",
             "float32", "--log_level", "warning"],
            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=root)
        return proc, f"http://127.0.0.1:{port}"

    proc, url = start()
    tries = 1
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                said = (root / "server.log").read_text()
                # the free port was taken while the server started (tens of seconds under
                # load: a benchmark's outgoing connections use the same port range): another
                if "address already in use" in said and tries < 3:
                    proc, url = start()
                    tries += 1
                    continue
                pytest.fail(f"transformers serve exited {proc.returncode}:\n" + said[-3000:])
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if json.load(r).get("status") == "ok":
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("transformers serve not ready in 180 s:\n"
                            + (root / "server.log").read_text()[-3000:])
            time.sleep(0.5)
        with LoggingProxy(url) as proxy:
            yield url, model, root / "server.log", proxy
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _greedy_in_process(model_dir: Path, prompt: str, max_new_tokens: int) -> tuple[list[int], str]:
    """What the server should answer: the same chat template, greedy, decoded without specials."""
    import torch

    transformers = hf_fixtures.import_transformers()
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    lm = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    inputs = tok.apply_chat_template([{"role": "user", "content": prompt}],
                                     add_generation_prompt=True, return_tensors="pt")
    with torch.no_grad():
        out = lm.generate(inputs, attention_mask=torch.ones_like(inputs), do_sample=False,
                          max_new_tokens=max_new_tokens, pad_token_id=hf_fixtures.EOS)
    ids = out[0, inputs.shape[1]:].tolist()
    return ids, tok.decode(ids, skip_special_tokens=True)


def _words(ids: list[int]) -> list[int]:
    """The ids that come back from the server's text: special tokens (skipped) left out."""
    return [i for i in ids if i >= len(hf_fixtures.SPECIALS)]


def test_streams_the_greedy_text_of_the_model(server) -> None:
    url, model_dir, log, _ = server
    transformers = hf_fixtures.import_transformers()
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    client = OpenAIStreamClient(ClientSettings(base_url=url, model=str(model_dir),
                                               token_ids=False, stall_timeout_s=120))
    firsts: list[tuple[list[int], float]] = []

    def tokenize(text: str) -> list[int]:
        return list(tok(text, add_special_tokens=False)["input_ids"])

    async def go():
        return await client.complete([{"role": "user", "content": PROMPT}], MAX_TOKENS,
                                     on_first_token=lambda ids, t: firsts.append((ids, t)),
                                     chat=True, tokenize=tokenize)

    result = asyncio.run(go())
    # the first request loads the model; a second one shows the steady streaming
    result2 = asyncio.run(go())
    ids, text = _greedy_in_process(model_dir, PROMPT, MAX_TOKENS)
    assert _words(ids) and text, "the random model generated nothing printable: another seed"
    for r in (result, result2):
        assert r.text.strip() == text.strip(), log.read_text()[-2000:]
        assert r.token_ids == _words(ids) and r.n_tokens == len(_words(ids))
        assert 0 < r.ttft_s < r.total_s
        assert r.finish_reason in ("stop", "length")
    assert [f[0] for f in firsts] == [_words(ids)[:1]] * 2  # the first word, tokenized


def test_streams_chunk_by_chunk(server) -> None:
    """The answer arrives as several ``data:`` events with content (read raw off the wire), not
    one blob: the server really streams."""
    url, model_dir, _, _ = server
    body = json.dumps({"model": str(model_dir), "max_tokens": MAX_TOKENS, "stream": True,
                       "messages": [{"role": "user", "content": PROMPT}]}).encode()
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    contents = []
    with urllib.request.urlopen(request, timeout=120) as r:
        for line in r:
            if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                delta = json.loads(line[5:])["choices"][0].get("delta", {})
                if delta.get("content"):
                    contents.append(delta["content"])
    assert len(contents) >= 2, contents


def test_the_default_client_is_refused_with_the_servers_words(server) -> None:
    """Without ``token_ids=False`` the client asks for ``return_token_ids``, which this server
    refuses (HTTP 422); the error names the endpoint and says why."""
    from mlharness.backends.openai_stream import EndpointError

    url, model_dir, _, _ = server
    client = OpenAIStreamClient(ClientSettings(base_url=url, model=str(model_dir)))
    with pytest.raises(EndpointError, match=r"HTTP 422.*return_token_ids") as refused:
        asyncio.run(client.complete([{"role": "user", "content": PROMPT}], 4, chat=True))
    assert "--backend-option extensions=false" in refused.value.hint  # the option that fixes it
    # no /v1/completions on this server: the hint names chat=true
    with pytest.raises(EndpointError, match=r"HTTP 404") as missing:
        asyncio.run(client.complete("x", 4, chat=False))
    assert "--backend-option chat=true" in missing.value.hint


def _serve_args(proxy: LoggingProxy, model_dir: Path, data: Path, runs: Path) -> list[str]:
    """The quick start's flags for transformers serve (docs/llm.md), through the proxy."""
    return ["-b", "llama3.1-8b", "--backend", "openai", "--endpoint", proxy.url,
            "--dataset", str(data), "--backend-option", f"served_model={model_dir}",
            "--backend-option", "chat=true", "--backend-option", "extensions=false",
            "--backend-option", f"tokenizer={model_dir}", "--task-option",
            f"max_new_tokens={MAX_TOKENS}", "--output-dir", str(runs), "--no-progress"]


def _dataset(model_dir: Path, path: Path) -> Path:
    transformers = hf_fixtures.import_transformers()
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    return llm_fixtures.write_cnn_dataset(path, [(p, p) for p in hf_fixtures.PROMPTS],
                                          lambda t: tok.encode(t))


def _tokens(model_dir: Path):
    transformers = hf_fixtures.import_transformers()
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    return lambda text: list(tok(text, add_special_tokens=False)["input_ids"])


def test_a_chat_accuracy_run_logs_the_greedy_answers_the_proxy_saw(server, tmp_path) -> None:
    """``mlharness run -b llama3.1-8b --mode accuracy`` in chat mode against the real server:
    every sample once through LoadGen; the proxy saw the reference's chat message (the prompt
    ``tok_input`` encodes) for each; each logged answer is the model's greedy generation and
    holds as many tokens as the text the proxy relayed."""
    from mlharness.cli.main import main
    from mlharness.llm.accuracy_log import read_entries

    url, model_dir, log, proxy = server
    data = _dataset(model_dir, tmp_path / "cnn_eval.json")
    runs = tmp_path / "runs"
    start = len(proxy.exchanges())
    code = main(["run", "-s", "Offline", "--mode", "accuracy",
                 *_serve_args(proxy, model_dir, data, runs)])
    run_dir = next(runs.rglob("run.json")).parent
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "ok", (record.get("error"), log.read_text()[-2000:])
    assert code in (0, 1)  # 1: a random model's ROUGE misses llama3.1-8b's target, of course
    assert record["backend"]["extensions"] is False
    assert record["backend"]["prompt"] == ("the reference's chat messages to "
                                           "/v1/chat/completions, with the server's chat template")
    sent = {e.body["messages"][0]["content"]: e for e in proxy.exchanges()[start:]}
    assert sorted(sent) == sorted(f"Summarize: {p}" for p in hf_fixtures.PROMPTS)
    assert all("chat_template" not in e.body for e in sent.values())  # extensions=false
    tokens = _tokens(model_dir)
    entries = {e.qsl_idx: e for e in read_entries(run_dir / "mlperf_log_accuracy.json")}
    assert sorted(entries) == list(range(len(hf_fixtures.PROMPTS)))
    for i, prompt in enumerate(hf_fixtures.PROMPTS):
        expected, _ = _greedy_in_process(model_dir, f"Summarize: {prompt}", MAX_TOKENS)
        got = np.frombuffer(bytes.fromhex(entries[i].data), dtype=np.int32).tolist()
        assert got == _words(expected) and got, (i, got, expected)
        assert got == tokens(sent[f"Summarize: {prompt}"].text)  # the proxy's text, tokenized
        assert entries[i].token_count == len(got)
    assert record["accuracy"]["metric"] == "ROUGE1"  # scored offline from the logged ids


def test_interactive_token_latencies_are_the_proxys_and_test06_passes(server, tmp_path) -> None:
    """An Interactive run against the real server through the proxy: LoadGen's mean TTFT and
    TPOT are the proxy's (what the server delivered, measured at the wire) plus at most the
    client's own time; then TEST06 on it: every answer's first token as reported is the
    answer's first, and every logged count is the proxy's text's."""
    from mlharness.cli.main import main
    from mlharness.llm.accuracy_log import read_entries

    url, model_dir, log, proxy = server
    data = _dataset(model_dir, tmp_path / "cnn_eval.json")
    runs = tmp_path / "runs"
    flags = _serve_args(proxy, model_dir, data, runs)
    start = len(proxy.exchanges())
    # 6 QPS: the TEST06 audit below is 100 queries (its audit.config) at the run's target; the
    # tiny model answers in ~0.1 s, so the server stays far from saturation
    main(["run", "-s", "Interactive", "--target-qps", "6", "--min-query-count", "24",
          "--warmup", "1", *flags])
    run_dir = next(runs.glob("llama3.1-8b/Interactive-performance-*"))
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "ok", (record.get("error"), log.read_text()[-2000:])
    timed = [e for e in proxy.exchanges()[start + 1:] if e.contents()]  # not the warm-up
    assert len(timed) >= 24
    tokens = _tokens(model_dir)
    ttft = np.mean([e.ttft_s for e in timed]) * 1e3
    tpot = np.mean([(e.last_s - e.ttft_s) / (len(tokens(e.text)) - 1) for e in timed
                    if len(tokens(e.text)) > 1]) * 1e3
    measured = record["result"]["tokens_ms"]
    # the client adds its own send and read to what the proxy saw: never less (1 ms of clock
    # slack), a little more (a loaded machine delays the client's loop too)
    assert ttft - 1 <= measured["ttft_mean_ms"] <= ttft * 1.5 + 50, (measured, ttft)
    assert tpot * 0.8 - 1 <= measured["tpot_mean_ms"] <= tpot * 1.5 + 10, (measured, tpot)
    # TEST06 on this run: LoadGen logs every answer; the official checks pass
    before = len(proxy.exchanges())
    code = main(["compliance", "--no-progress", "--reference-perf", str(run_dir), "--output",
                 str(tmp_path / "TEST06-out"), "--output-dir", str(runs)])
    verify = (tmp_path / "TEST06-out" / "TEST06" / "verify_accuracy.txt").read_text()
    assert code == 0, verify
    assert "First token check pass: True" in verify and "TEST06 verification complete" in verify
    audit = next(runs.glob("compliance/TEST06/llama3.1-8b/Interactive-TEST06-*"))
    by_prompt = {e.body["messages"][0]["content"]: e for e in proxy.exchanges()[before:]
                 if e.contents()}
    for entry in read_entries(audit / "mlperf_log_accuracy.json"):
        prompt = f"Summarize: {hf_fixtures.PROMPTS[entry.qsl_idx]}"
        assert entry.token_count == len(tokens(by_prompt[prompt].text))
