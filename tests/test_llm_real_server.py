"""A real OpenAI-compatible server: ``transformers serve`` (transformers' FastAPI/uvicorn server)
on a tiny random-weight Llama built here (config, weights and tokenizer made in the test,
nothing downloaded, HF offline), streamed through ``OpenAIStreamClient`` and, end to end, by
``mlharness run --backend openai`` (the real LoadGen, an accuracy run whose logged ids are the
model's greedy answers).

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
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_HOME": str(root / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    log = (root / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "transformers.commands.transformers_cli", "serve",
         "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--dtype", "float32",
         "--log_level", "warning"],
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=root)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                pytest.fail(f"transformers serve exited {proc.returncode}:\n"
                            + (root / "server.log").read_text()[-3000:])
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
        yield url, model, root / "server.log"
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
    url, model_dir, log = server
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
    url, model_dir, _ = server
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

    url, model_dir, _ = server
    client = OpenAIStreamClient(ClientSettings(base_url=url, model=str(model_dir)))
    with pytest.raises(EndpointError, match=r"HTTP 422.*return_token_ids"):
        asyncio.run(client.complete([{"role": "user", "content": PROMPT}], 4, chat=True))


def test_an_accuracy_run_through_the_openai_backend_logs_the_greedy_answers(
        server, tmp_path) -> None:
    """``mlharness run -b llama3.1-8b --backend openai`` against the real server: every sample
    once through LoadGen, and each logged answer is what the model generates greedily here."""
    from mlharness.cli.main import main
    from mlharness.llm.accuracy_log import read_entries

    url, model_dir, log = server
    prompts = hf_fixtures.PROMPTS
    transformers = hf_fixtures.import_transformers()
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    data = llm_fixtures.write_cnn_dataset(tmp_path / "cnn_eval.json",
                                          [(p, p) for p in prompts], lambda t: tok.encode(t))
    runs = tmp_path / "runs"
    code = main(["run", "-b", "llama3.1-8b", "-s", "Offline", "--mode", "accuracy",
                 "--backend", "openai", "--endpoint", url, "--dataset", str(data),
                 "--backend-option", f"served_model={model_dir}", "--backend-option",
                 "chat=true", "--backend-option", f"tokenizer={model_dir}", "--backend-option",
                 "extensions=false", "--backend-option", "concurrency=1", "--task-option",
                 f"max_new_tokens={MAX_TOKENS}", "--task-option", f"tokenizer={model_dir}",
                 "--output-dir", str(runs), "--no-progress"])
    run_dir = next(runs.rglob("run.json")).parent
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "ok", (record.get("error"), log.read_text()[-2000:])
    assert code in (0, 1)  # 1: a random model's ROUGE misses llama3.1-8b's target, of course
    assert record["backend"]["extensions"] is False
    entries = {e.qsl_idx: e for e in read_entries(run_dir / "mlperf_log_accuracy.json")}
    assert sorted(entries) == list(range(len(prompts)))
    for i, prompt in enumerate(prompts):
        expected, _ = _greedy_in_process(model_dir, f"Summarize: {prompt}", MAX_TOKENS)
        got = np.frombuffer(bytes.fromhex(entries[i].data), dtype=np.int32).tolist()
        assert got == _words(expected) and got, (i, got, expected)
        assert entries[i].token_count == len(got)
    assert record["accuracy"]["metric"] == "ROUGE1"  # scored offline from the logged ids
