"""LLM benchmark pieces (issue 34), not yet wired into ``mlharness run``.

``sentences`` (nltk's Punkt with English parameters on disk), ``accuracy_log`` (LoadGen's token
accuracy log), ``rouge`` (the llama benchmarks' official ROUGE), ``exact_match`` (what of the
deepseek-r1 / gpt-oss-120b scoring needs no code execution), ``datasets`` (the reference
harnesses' dataset files). See docs/llm.md.
"""
