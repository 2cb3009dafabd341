"""Real llama3.1-8b runs for the submission tests: a small CNN/DailyMail-style dataset and its
tokenizer (tests/llm_fixtures.py), and a scripted streaming backend that answers each prompt with
its reference summary, so ROUGE reaches the round's targets and the only things a fixture cannot
reach are the ones that need the full dataset.

``--backend stream_backends:TimedStream --backend-option outputs=FILE`` (``tests/`` on
PYTHONPATH): first token ``ttft_s`` after submit, then one token every ``gap_s``, the output the
ids FILE maps the prompt's ids to.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llm_fixtures import articles, import_transformers, make_tokenizer, write_cnn_dataset

BENCHMARK = "llama3.1-8b"
SAMPLES = 24
#: Offline: every query's first token 2.1 s after it was issued, so the 2 s test run is VALID
#: however fast the machine; the target issues the closed minimum of samples (13368) in one query
OFFLINE = {"target_qps": 6100.0, "ttft_s": 2.1}
#: Interactive: 460 queries (early stopping on TTFT/TPOT) at 200/s, far inside the limits
INTERACTIVE = {"target_qps": 200.0, "ttft_s": 0.01}
GAP_S = 0.001


def make_inputs(root: Path) -> dict[str, Path]:
    """The dataset file, its tokenizer and the answers file under ``root``."""
    pairs = articles(SAMPLES)
    prompts = [f"Summarize: {article}" for article, _ in pairs]
    tok_dir = make_tokenizer(root / "tokenizer",
                             [t for pair in pairs for t in pair] + prompts)
    tokenizer = import_transformers().AutoTokenizer.from_pretrained(str(tok_dir))

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    dataset = write_cnn_dataset(root / "cnn_eval.json", pairs, encode)
    answers = root / "answers.json"
    answers.write_text(json.dumps([[encode(p), encode(h)] for p, (_, h) in zip(prompts, pairs)]))
    return {"dataset": dataset, "tokenizer": tok_dir, "answers": answers}


def spec_for(inputs: dict[str, Path], runs: Path, scenario: str, mode: str, **kw: Any) -> Any:
    """The RunSpec of one test-length run (``--test``) of the fixture."""
    from mlharness.spec import RunSpec

    timing = OFFLINE if scenario == "Offline" else INTERACTIVE
    options = {"ttft_s": timing["ttft_s"], "gap_s": GAP_S, "outputs": str(inputs["answers"])}
    return RunSpec(benchmark=BENCHMARK, scenario=scenario, mode=mode,
                   backend="stream_backends:TimedStream", dataset=inputs["dataset"],
                   output_dir=runs, target_qps=timing["target_qps"], backend_option=options,
                   task_option={"tokenizer": str(inputs["tokenizer"])}, valid=False, **kw)


def make_runs(root: Path) -> dict[str, Path]:
    """Offline and Interactive, performance and accuracy, through the real LoadGen
    (``mlharness.runner.execute``); the run directories by ``<scenario>-<mode>``."""
    from mlharness.runner import execute

    inputs = make_inputs(root)
    runs = root / "runs"
    out: dict[str, Path] = {"runs": runs, **inputs}
    for scenario in ("Offline", "Interactive"):
        for mode in ("performance", "accuracy"):
            record = execute(spec_for(inputs, runs, scenario, mode))
            assert record.status == "ok", (scenario, mode, record.status)
            out[f"{scenario}-{mode}"] = record.run_dir
    return out


SYSTEM_TOML = """[system]
system_type = "datacenter"
system_type_detail = "datacenter server"
"""
