"""LLM benchmark pieces (issue 34), not yet wired into ``mlharness run`` (docs/llm.md).

``accuracy_log`` (LoadGen's token accuracy log), ``sentences`` (nltk's Punkt with the English
parameters on disk), ``rouge`` (the llama benchmarks' official ROUGE), ``exact_match``
(deepseek-r1) and ``gpt_oss_accuracy`` (gpt-oss-120b) for what needs no code execution,
``datasets`` (the reference harnesses' dataset files), ``test06``, ``test07`` and ``test09``
(the LLM compliance verifications). The streaming client is ``mlharness.backends.openai_stream``.
"""
