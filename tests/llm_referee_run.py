"""Run an official LLM accuracy script, unmodified, in the referee's Python, offline.

Usage: python llm_referee_run.py SCRIPT [ARGS...]   (NLTK_DATA must hold punkt_tab)
       python llm_referee_run.py -c CODE [ARGS...]  (CODE with the same stand-ins)

The official scripts import torch, datasets and HF ``evaluate`` (whose "rouge" metric is
fetched from the Hub at run time) and call ``nltk.download``. None of that can run here, so
before the script runs: ``torch`` and ``datasets`` become empty stand-ins (the scripts import
but never call them when scoring), ``nltk.download`` does nothing (NLTK_DATA already holds the
model), and ``evaluate.load("rouge")`` returns a stand-in that makes the calls HF evaluate's
rouge metric makes: ``rouge_score.RougeScorer(rouge_types, use_stemmer)``, ``score(ref, pred)``
per pair, F-measures per type when ``use_aggregator=False``.
"""

import importlib.machinery
import runpy
import sys
import types
from pathlib import Path

import transformers  # noqa: F401  (imported before torch is stubbed: it then finds no torch)
from transformers import AutoTokenizer  # noqa: F401


def _stub(name, **attrs):
    mod = types.ModuleType(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


class _Rouge:
    def compute(self, predictions, references, rouge_types=None, use_aggregator=True,
                use_stemmer=False, tokenizer=None):
        from rouge_score import rouge_scorer
        assert not use_aggregator and tokenizer is None
        types_ = rouge_types or ["rouge1", "rouge2", "rougeL", "rougeLsum"]
        scorer = rouge_scorer.RougeScorer(rouge_types=types_, use_stemmer=use_stemmer)
        scores = [scorer.score(ref, pred) for ref, pred in zip(references, predictions)]
        return {k: [s[k].fmeasure for s in scores] for k in scores[0]}


def _load(name, *args, **kwargs):
    assert name == "rouge", name
    return _Rouge()


_stub("torch", Tensor=object)
_stub("torch.nn")
_stub("torch.nn.functional", pad=None)
_stub("torch.utils")
_stub("torch.utils.data", DataLoader=None)
_stub("datasets", load_dataset=None, load_from_disk=None)
_stub("evaluate", load=_load)
import nltk

nltk.download = lambda *a, **k: True

if sys.argv[1] == "-c":  # run code (sys.argv[2]) with the stand-ins in place
    code, sys.argv = sys.argv[2], [sys.argv[0], *sys.argv[3:]]
    exec(compile(code, "<referee -c>", "exec"), {"__name__": "__main__"})  # noqa: S102
    sys.exit(0)
script = Path(sys.argv[1]).resolve()
sys.path.insert(0, str(script.parent))
sys.argv = [str(script), *sys.argv[2:]]
runpy.run_path(str(script), run_name="__main__")
