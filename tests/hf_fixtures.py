"""A tiny Hugging Face causal LM on disk, built offline: a random-weight Llama (2 layers, hidden
32) and a word-level tokenizer of its own, for the hf backend and the LLM end-to-end tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path

#: the tokenizer's words (ids after the specials); every word of PROMPTS is among them
WORDS = ("the a cat dog sat ran on under mat log and then it was quick slow red blue big small "
         "news said today summarize article").split()
SPECIALS = ["<unk>", "<s>", "</s>"]  # ids 0, 1, 2: LlamaConfig's default bos/eos ids
BOS, EOS = 1, 2
VOCAB = 300
PROMPTS = ["the cat sat on the mat", "a dog ran under the log", "summarize the news article"]


def import_transformers():
    """transformers with its torch models. ``llm_fixtures.import_transformers`` imports it
    without them (USE_TORCH=0, to save 20 s); a module that ran before in this process then
    left a copy without models, which is dropped and imported again."""
    import transformers

    if not transformers.utils.is_torch_available():
        for name in [n for n in sys.modules if n == "transformers" or n.startswith("transformers.")]:
            del sys.modules[name]
        os.environ.pop("USE_TORCH", None)
        import transformers
    return transformers


def tiny_llama(directory: Path, tokenizer: bool = True, seed: int = 0) -> Path:
    """A random-weight LlamaForCausalLM saved in ``directory`` (config.json, safetensors,
    generation_config.json), with a tokenizer that adds ``<s>`` unless ``tokenizer`` is False."""
    import torch

    transformers = import_transformers()
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64, max_position_embeddings=256,
        bos_token_id=BOS, eos_token_id=EOS)
    transformers.LlamaForCausalLM(config).save_pretrained(directory)
    if tokenizer:
        word_tokenizer(directory)
    return directory


def word_tokenizer(directory: Path) -> Path:
    """A fast word-level tokenizer (whitespace split, ``<s>`` first) saved in ``directory``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    transformers = import_transformers()
    vocab = {w: i for i, w in enumerate(SPECIALS + list(WORDS))}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    raw.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[
        ("<s>", BOS)])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>",
                                                bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(directory)
    return directory
