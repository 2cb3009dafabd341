"""The LLM reference harnesses' dataset files, read as typed samples.

| benchmark | file (what the reference reads) | fields used |
|---|---|---|
| llama3.1-8b, -edge | ``cnn_eval.json`` / ``sample_cnn_eval_5000.json``: a JSON list of records (language/llama3.1-8b/dataset.py, download_cnndm.py) | ``input``, ``tok_input``, ``output`` |
| llama2-70b | pandas pickle (language/llama2-70b/dataset.py, evaluate-accuracy.py) | ``input``, ``tok_input``, ``output`` |
| deepseek-r1 | pandas pickle (language/deepseek-r1/mlperf/utils.py, eval_accuracy.py) | ``text_input``; ``gt_output`` or ``ground_truth``; ``dataset`` (or ``metric``) |
| gpt-oss-120b | pandas pickle or parquet (language/gpt-oss-120b/utils/tokenization.py) | ``tok_input`` or ``input_tokens``; ``dataset``, ``ground_truth`` |

Pickles are read with pandas, as the references do; unpickling runs code, so open only files
you trust (the MLCommons downloads).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from mlharness.errors import ConfigError, DatasetError
from mlharness.rules import BenchmarkRules, rules_for


class LlmSample(BaseModel):
    """One prompt and what it is scored against (fields a data set lacks stay None)."""

    input_ids: list[int] | None = None
    prompt: str | None = None
    reference: str | None = None  # the summary / answer text ROUGE compares with
    ground_truth: Any = None  # exact-match answer
    dataset: str | None = None  # the source set (deepseek-r1 / gpt-oss-120b)


class LlmDataset(BaseModel):
    benchmark: str
    path: Path
    samples: list[LlmSample]

    def references(self) -> list[str]:
        return [s.reference or "" for s in self.samples]


def _columns(rows: list[dict[str, Any]], path: Path, benchmark: str, wanted: dict[str, tuple[
        str, ...]]) -> dict[str, str | None]:
    """For each sample field, the first of its candidate columns present (required ones: error)."""
    present = set(rows[0]) if rows else set()
    out: dict[str, str | None] = {}
    for field, names in wanted.items():
        found = next((n for n in names if n.lstrip("?") in present), None)
        if found is None and not all(n.startswith("?") for n in names):
            raise DatasetError(
                f"{path} has no {' or '.join(n.lstrip('?') for n in names)} field: not the "
                f"{benchmark} reference dataset (fields: {', '.join(sorted(present)) or 'none'})",
                f"use the file the {benchmark} reference harness reads")
        out[field] = found.lstrip("?") if found else None
    return out


def _value(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return None
    return v.tolist() if hasattr(v, "tolist") else v


def _samples(rows: list[dict[str, Any]], path: Path, benchmark: str,
             wanted: dict[str, tuple[str, ...]]) -> LlmDataset:
    if not rows:
        raise DatasetError(f"{path} holds no samples", "is the download complete?")
    cols = _columns(rows, path, benchmark, wanted)
    samples = []
    for i, row in enumerate(rows):
        data = {f: _value(row.get(c)) for f, c in cols.items() if c is not None}
        try:
            samples.append(LlmSample(**data))
        except ValidationError as exc:
            bad = exc.errors()[0]
            raise DatasetError(f"{path} sample {i}: {bad['loc'][0]} {bad['msg'].lower()}",
                               f"is this the {benchmark} reference dataset?") from exc
    return LlmDataset(benchmark=benchmark, path=path, samples=samples)


def _records_json(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path} is not JSON ({exc.msg}, line {exc.lineno})",
                           "llama3.1-8b reads cnn_eval.json, a JSON list of records") from exc
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise DatasetError(f"{path} is not a JSON list of records",
                           "llama3.1-8b reads cnn_eval.json as written by download_cnndm.py")
    return data


def _frame_rows(path: Path) -> list[dict[str, Any]]:
    try:
        import pandas as pd  # type: ignore[import-untyped]
    except ImportError as exc:
        raise ConfigError("reading the reference's pickled data set needs pandas",
                          "pip install 'mlharness[llm]'") from exc
    try:
        if path.suffix == ".parquet":
            frame = pd.read_parquet(path)
        else:
            frame = pd.read_pickle(path)
    except ImportError as exc:  # pandas names no module when no parquet engine is there
        engine = exc.name or "pyarrow"
        raise ConfigError(f"reading {path.name} needs {engine}", f"pip install {engine}") \
            from exc
    except Exception as exc:
        kind = "parquet" if path.suffix == ".parquet" else "pickle"
        raise DatasetError(f"{path} is not a pandas {kind} file ({type(exc).__name__})",
                           "pass the reference's dataset file") from exc
    if not isinstance(frame, pd.DataFrame):
        raise DatasetError(f"{path} holds a {type(frame).__name__}, not a DataFrame",
                           "pass the reference's dataset file")
    return frame.to_dict(orient="records")


#: benchmark -> (reader of rows, field -> candidate columns; "?" marks an optional one)
FORMATS: dict[str, tuple[Any, dict[str, tuple[str, ...]]]] = {
    "cnn_dailymail": (_records_json, {"input_ids": ("tok_input",), "prompt": ("?input",),
                                      "reference": ("output",)}),
    "open_orca": (_frame_rows, {"input_ids": ("tok_input",), "prompt": ("?input",),
                                "reference": ("?output",)}),
    "deepseek_r1_mixed": (_frame_rows, {"prompt": ("text_input",),
                                        "ground_truth": ("gt_output", "ground_truth"),
                                        "dataset": ("dataset",),
                                        "input_ids": ("?tok_input",)}),
    "gpt_oss_mixed": (_frame_rows, {"input_ids": ("tok_input", "input_tokens"),
                                    "ground_truth": ("?ground_truth",),
                                    "dataset": ("?dataset",)}),
}


def read(benchmark: BenchmarkRules | str, path: Path) -> LlmDataset:
    """The samples of ``benchmark``'s reference dataset file at ``path`` (its rules, or its
    name: the newest round's rules)."""
    bench = rules_for(benchmark) if isinstance(benchmark, str) else benchmark
    if bench.dataset not in FORMATS:
        raise ConfigError(f"{bench.harness!r} is not an LLM benchmark",
                          "known datasets: " + ", ".join(FORMATS))
    benchmark = bench.harness
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{benchmark} dataset {path} not found",
                           "download it as the reference README says")
    reader, wanted = FORMATS[bench.dataset]
    rows = reader(path)
    if bench.dataset == "deepseek_r1_mixed" and rows and "dataset" not in rows[0] \
            and "metric" in rows[0]:
        # eval_accuracy.py names the set from its metric: "gpqa_em" -> "gpqa"
        rows = [dict(r, dataset=str(r["metric"]).replace("_em", "").replace("_", ""))
                for r in rows]
    return _samples(rows, path, benchmark, wanted)
