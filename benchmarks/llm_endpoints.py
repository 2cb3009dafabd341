"""MLCommons' endpoints client as its CLI runs, for the LLM client benchmarks: its CLI in the
endpoints referee venv, the inputs it reads offline, and one round of ``inference-endpoint
benchmark`` read back from its report as a :class:`~llm_rounds.Round` (``llm_client.py``'s
docstring says what each side counts).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import time
from pathlib import Path

from llm_rounds import MODEL, PROMPT, ROOT, Round, Server, cpu_s


def endpoints_cli() -> Path:
    """Its CLI in the endpoints referee venv (``MLPERF_ENDPOINTS_PYTHON``'s, as tests use)."""
    python = os.environ.get("MLPERF_ENDPOINTS_PYTHON")
    bin_dir = Path(python).parent if python else ROOT / ".venv-referee-endpoints" / "bin"
    return bin_dir / "inference-endpoint"


def endpoints_inputs(folder: Path) -> tuple[Path, Path]:
    """A one-row pre-tokenized dataset and a word-level tokenizer (one token a word) that the
    endpoints client reads offline; their paths."""
    # lazy: only this side needs tokenizers/transformers (the base extras do not install them)
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # a chat template only so that the client's tool-call baseline does not log an error
    PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>", chat_template=(
        "{% for m in messages %}{{ m['content'] }} {% endfor %}")).save_pretrained(
        folder / "tokenizer")
    # ``input_tokens``: the column completions_adapter.py sends as the prompt
    (folder / "prompts.jsonl").write_text(json.dumps({"input_tokens": PROMPT}) + "\n")
    return folder / "prompts.jsonl", folder / "tokenizer"


def endpoints_round(cli: Path, inputs: tuple[Path, Path], folder: Path, server: Server,
                    load: list[str], requests: int, tokens: int, workers: int,
                    warm: int, startup: tuple[float, float] | None = None) -> Round:
    """One run of ``inference-endpoint benchmark`` with ``load`` (``online --load-pattern
    ...`` or ``offline``); its report's tokens/s, TTFT and TPOT. Its client CPU is every
    process of its that ended (``RUSAGE_CHILDREN``: the CLI and the workers and services it
    waits for) less ``startup``, what a one-request run of it spent (its start and end), when
    given ((0, 0): all of it); None when that is less than nothing (a round too short to tell,
    ``--quick``)."""
    dataset, tokenizer = inputs
    report = folder / f"report-{time.monotonic_ns()}"
    home = folder / "home"
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_HOME=str(home / "hf"), XDG_CACHE_HOME=str(home / "cache"), TQDM_DISABLE="1",
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)  # nothing of mlharness on its path
    command = [str(cli), "benchmark", *load, "--endpoints", f"http://127.0.0.1:{server.port}",
               "--model", MODEL, "--tokenizer", str(tokenizer), "--dataset", str(dataset),
               "--api-type", "openai_completions", "--streaming", "on",
               "--max-output-tokens", str(tokens), "--num-samples", str(requests),
               "--duration", "0", "--workers", str(workers),
               "--client.warmup-connections", str(warm), "--no-cpu-affinity",
               "--report-dir", str(report)]
    server.stats()  # forget what came before
    server0 = cpu_s(server.pid)
    # a session of its own, its output to a file: a service process of its that outlives the
    # CLI is ended with it, and holds no pipe this script would wait on
    output = folder / f"endpoints-{time.monotonic_ns()}.log"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(output, "w") as sink:
        proc = subprocess.Popen(command, env=env, cwd=folder, stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=900)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = (after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime)
    text = output.read_text(errors="replace")
    spent = cpu_s(server.pid) - server0
    summary_path = report / "performance" / "result_summary.json"
    if proc.returncode != 0 or not summary_path.is_file():
        tail = text.strip().splitlines()[-15:]
        raise RuntimeError(f"inference-endpoint exited {proc.returncode}:\n" + "\n".join(tail))
    summary = json.loads(summary_path.read_text())
    wall = summary["duration_ns"] / 1e9
    total = int(summary["output_sequence_lengths"]["total"])
    completed = summary["n_samples_completed"] - summary["n_samples_failed"]
    if total != completed * tokens:
        print(f"  endpoints counted {total} output tokens for {completed} answers of {tokens}: "
              "its tokens are not the same unit here")
    ttft = summary["ttft"]["percentiles"]
    tpot99 = (summary.get("tpot") or {}).get("percentiles", {}).get("99.0")
    stats = server.stats()
    cpu = (own[0] - startup[0], own[1] - startup[1]) if startup is not None else None
    if cpu is not None and min(cpu) < 0:  # a round shorter than its start and end: not told
        cpu = None
    return Round("endpoints", total, wall, [], summary["n_samples_failed"], cpu, spent, [],
                 (summary["tps"], ttft["50.0"] / 1e9, ttft["99.0"] / 1e9,
                  tpot99 / 1e9 if tpot99 is not None else float("nan")), server=stats,
                 arrival_s=stats.get("arrival_s") if load[0] == "offline" or
                 "poisson" in load else None)
