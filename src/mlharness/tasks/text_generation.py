"""The LLM benchmarks (llama3.1-8b, llama3.1-8b-edge, llama2-70b-99/99.9, deepseek-r1,
gpt-oss-120b): prompts from the reference dataset file, the reference harness's sampling, and
accuracy scored offline exactly as the official scripts do.

Everything that differs between them is data in ``rules/<round>.toml`` (model keys, limits,
sampling, targets) plus the scorer chosen by the dataset below. A text-generation backend
(``--backend openai`` or ``hf``) streams the answer; LoadGen logs the output token ids (int32, as
every reference SUT writes them), which the scorer decodes with the model's tokenizer.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from mlharness.errors import ConfigError, DatasetError
from mlharness.llm import datasets, eos, exact_match, gpt_oss_accuracy, rouge
from mlharness.options import Options
from mlharness.prompts import GenerationRequest
from mlharness.rules import BenchmarkRules
from mlharness.tasks.base import AccuracyResult, GenerationTask, TaskOptions

#: the files a Hugging Face tokenizer directory holds (any one will do)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


class TextGenerationOptions(Options):
    """``--task-option`` keys of the LLM benchmarks."""

    #: the model's Hugging Face tokenizer directory, to decode the accuracy log (default: --model
    #: when it is such a directory)
    tokenizer: Path | None = None
    #: fewer new tokens than the reference harness (quick trials; the result says so):
    #: 1 .. the benchmark's reference count (rules/<round>.toml ``generation``)
    max_new_tokens: int | None = None


Scorer = Callable[["TextGenerationTask", list[int], list[np.ndarray]], AccuracyResult]


class TextGenerationTask(GenerationTask):
    """One LLM benchmark of the round's rules: prompts in, token ids out."""

    rules: BenchmarkRules  # always given (its generation settings and scorer come from them)

    def __init__(self, name: str, options: TaskOptions) -> None:
        self.generation = self.take_rules(name, options)
        parsed = options.parsed(TextGenerationOptions)
        self.max_new_tokens = _max_new_tokens(name, parsed.max_new_tokens,
                                              self.generation.max_new_tokens)
        #: the task's own, else --model's, else the backend's (a server's text is tokenized
        #: with it, so it is the model's)
        self.tokenizer = (parsed.tokenizer or _tokenizer_dir(options.model)
                          or options.backend_tokenizer)
        if options.dataset is None:
            raise DatasetError(f"{name} needs its dataset file",
                               f"give --dataset FILE: the {self.rules.dataset} file the "
                               f"reference harness reads (docs/llm.md)")
        self.dataset = datasets.read(self.rules, options.dataset)
        if not self.dataset.samples:
            raise DatasetError(f"{options.dataset} holds no samples", "is it the right file?")
        count = len(self.dataset.samples)
        self.count = min(count, options.max_samples) if options.max_samples else count
        tok = self.tokenizer
        #: what an answer's ids are checked against: the tokenizer's vocabulary size and EOS id
        self.vocab_size, self.eos_token_id = ((eos.vocab_size(tok), eos.eos_token_id(tok))
                                              if tok is not None and Path(tok).is_dir()
                                              else (None, None))

    # ---- what LoadGen and the SUT ask ---------------------------------------------------------

    def load_samples(self, indices: Sequence[int]) -> None:
        """Prompts are small and read once, at start."""

    def unload_samples(self, indices: Sequence[int]) -> None:
        """Nothing to drop."""

    def request(self, index: int) -> GenerationRequest:
        """Sample ``index`` as a prompt with the reference harness's sampling."""
        sample = self.dataset.samples[index]
        g = self.generation
        ids = tuple(sample.input_ids) if sample.input_ids is not None else None
        messages = tuple(sample.messages) if sample.messages else None
        return GenerationRequest(input_ids=ids, text=sample.prompt,
                                 max_new_tokens=self.max_new_tokens,
                                 min_new_tokens=min(g.min_new_tokens, self.max_new_tokens),
                                 temperature=g.temperature, top_p=g.top_p, top_k=g.top_k,
                                 messages=messages,
                                 chat_template=g.chat_template if messages else None,
                                 vocab_size=self.vocab_size, eos_token_id=self.eos_token_id)

    def sample_length(self, index: int) -> int:
        ids = self.dataset.samples[index].input_ids
        return len(ids) if ids is not None else 0

    # ---- accuracy -----------------------------------------------------------------------------

    def score(self, entries: list[tuple[int, bytes]]) -> AccuracyResult:
        """The official accuracy of an accuracy log (``(qsl_idx, int32 ids)`` pairs)."""
        first: dict[int, np.ndarray] = {}
        every: list[tuple[int, np.ndarray]] = []
        for index, data in entries:
            if not 0 <= index < len(self.dataset.samples):
                raise DatasetError(f"accuracy log sample {index} is outside the dataset "
                                   f"({len(self.dataset.samples)} samples)",
                                   "is this the right --dataset?")
            ids = np.frombuffer(data, dtype=np.int32)
            every.append((index, ids))
            first.setdefault(index, ids)
        if not every:
            raise DatasetError("the accuracy log has no entries", "re-run the accuracy test")
        scorer = SCORERS[self.rules.dataset or ""]
        if scorer is _score_gpt_oss:  # its script scores every entry, duplicates included
            return scorer(self, [i for i, _ in every], [t for _, t in every])
        return scorer(self, list(first), list(first.values()))

    def check_scoring(self) -> None:
        """The tokenizer the log is decoded with, and the scorer's packages, before a sample
        is sent."""
        if self.tokenizer is None:
            raise ConfigError(f"scoring {self.name} needs the model's tokenizer, to decode the "
                              "logged token ids (nothing has been sent yet)",
                              "give --task-option tokenizer=DIR (a Hugging Face tokenizer "
                              "directory), or --model DIR / --backend-option tokenizer=DIR when "
                              "it holds one")
        if not Path(self.tokenizer).is_dir():
            raise ConfigError(f"the tokenizer directory {self.tokenizer} is not there",
                              "give the model checkpoint's directory (tokenizer files included)")
        needed = SCORER_MODULES.get(self.rules.dataset or "", ())
        lacking = [m for m in ("transformers", *needed) if importlib.util.find_spec(m) is None]
        if lacking:
            raise ConfigError(f"scoring {self.name} needs {', '.join(lacking)}, not installed "
                              "(nothing has been sent yet)", "pip install 'mlharness[llm]'")

    def decoder(self, fast: bool = False, keep_special: bool = False) -> rouge.Decoder:
        if self.tokenizer is None:
            raise ConfigError(f"scoring {self.name} needs the model's tokenizer",
                              "give --task-option tokenizer=DIR (a Hugging Face tokenizer "
                              "directory), or --model DIR when it holds one")
        return rouge.hf_decoder(self.tokenizer, use_fast=fast,
                                skip_special_tokens=not keep_special)

    def result(self, metrics: dict[str, float], line: str, main: str,
               details: dict[str, Any] | None = None) -> AccuracyResult:
        """The accuracy result judged against every target and upper limit of the rules."""
        bound = next(b for b in self.rules.accuracy if b.metric == main)
        failures = [f for f in self.rules.accuracy_failures(metrics)
                    if not f.startswith(f"{main} ")]
        if self.count < self.rules.accuracy_count:
            failures.append(f"{self.count} of the {self.rules.accuracy_count} samples scored")
        return AccuracyResult(metric=main, value=metrics.get(main, 0.0), text=line,
                              target=bound.value, failures=failures,
                              details={"metrics": metrics, **(details or {})})

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "dataset": str(self.dataset.path), "samples": self.count,
                "max_new_tokens": self.max_new_tokens,
                "tokenizer": str(self.tokenizer) if self.tokenizer else None}


def _score_rouge(task: TextGenerationTask, indices: list[int],
                 tokens: list[np.ndarray]) -> AccuracyResult:
    texts = task.decoder()(tokens)
    refs = [task.dataset.samples[i].reference or "" for i in indices]
    counts = any(b.metric == "TOKENS_PER_SAMPLE" for b in task.rules.accuracy)
    found = rouge.score_texts(texts, refs, gen_tok_len=sum(len(t) for t in tokens)
                              if counts else None)
    return task.result(found.metrics(), found.accuracy_line(), "ROUGE1")


def _score_exact_match(task: TextGenerationTask, indices: list[int],
                       tokens: list[np.ndarray]) -> AccuracyResult:
    samples = [task.dataset.samples[i] for i in indices]
    found = exact_match.score(task.decoder()(tokens), [s.ground_truth for s in samples],
                              [s.dataset or "" for s in samples], [len(t) for t in tokens])
    return _judged(task, found.exact_match, found.partial, found.tokens_per_sample,
                   found.unscored, lambda: found.accuracy_line(), "eval_accuracy.py")


def _score_gpt_oss(task: TextGenerationTask, indices: list[int],
                   tokens: list[np.ndarray]) -> AccuracyResult:
    samples = [task.dataset.samples[i] for i in indices]
    found = gpt_oss_accuracy.score(task.decoder(fast=True, keep_special=True)(tokens),
                                   [s.ground_truth for s in samples],
                                   [s.dataset or "" for s in samples])
    scored = sum(found.total.values())
    partial = 100.0 * sum(found.correct.values()) / scored if scored else 0.0
    return _judged(task, found.exact_match, partial, sum(map(len, tokens)) / len(tokens),
                   found.unscored, lambda: found.accuracy_line(), "eval_mlperf_accuracy.py")


def _judged(task: TextGenerationTask, value: float | None, partial: float,
            tokens_per_sample: float, unscored: dict[str, int], line: Callable[[], str],
            script: str) -> AccuracyResult:
    """An exact-match result; samples of sets scored only by running code (LiveCodeBench,
    math500) leave the official number to the official script, named in the result."""
    metrics = {"exact_match": value if value is not None else partial,
               "TOKENS_PER_SAMPLE": tokens_per_sample}
    if value is None:
        kinds = ", ".join(f"{k} ({n})" for k, n in unscored.items())
        text = (f"'partial_exact_match': {partial:.3f} (not the official number: {kinds} not "
                f"scored here; score mlperf_log_accuracy.json with the official {script})")
        result = task.result(metrics, text, "exact_match", {"unscored": unscored})
        result.failures.append(f"not scored here: {kinds}; use the official {script}")
        result.passed = False
        return result
    return task.result(metrics, line(), "exact_match")


#: what each scorer imports beyond transformers (the ``llm`` extra)
SCORER_MODULES: dict[str, tuple[str, ...]] = {
    "cnn_dailymail": ("nltk", "rouge_score"), "open_orca": ("nltk", "rouge_score")}
#: the scorer of each reference dataset (rules/<round>.toml ``dataset``)
SCORERS: dict[str, Scorer] = {
    "cnn_dailymail": _score_rouge,
    "open_orca": _score_rouge,
    "deepseek_r1_mixed": _score_exact_match,
    "gpt_oss_mixed": _score_gpt_oss,
}


def _max_new_tokens(name: str, given: int | None, reference: int) -> int:
    """``--task-option max_new_tokens``: 1 .. the reference harness's count (None: that)."""
    if given is None:
        return reference
    if not 1 <= given <= reference:
        raise ConfigError(f"--task-option max_new_tokens={given} is out of range: {name} "
                          f"allows 1..{reference} (the reference harness generates {reference})",
                          f"give a number from 1 to {reference}, or leave the option out")
    return given


def _tokenizer_dir(model: Path | None) -> Path | None:
    if model is not None and Path(model).is_dir() and any(
            (Path(model) / f).is_file() for f in TOKENIZER_FILES):
        return Path(model)
    return None


def create(name: str, options: TaskOptions) -> TextGenerationTask:
    return TextGenerationTask(name, options)
