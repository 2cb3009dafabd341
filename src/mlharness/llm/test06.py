"""TEST06, LLM output consistency, verified as compliance/TEST06/run_verification.py does.

Three checks over the audit run's accuracy log (the official verdicts, quirks included):

* first token (not in Offline): the separately reported first token(s), ``token_data``, equal
  the start of the output ``data``; an entry without ``token_data`` fails;
* EOS: an output ends in at most one EOS token; the official loop walks back from the last
  token and never looks at index 0, so ``[EOS, EOS]`` alone passes;
* sample length: the ``token_count`` the SUT reported equals the length of ``data`` (an entry
  without it makes the official script crash; here it fails the check).

The official ``-e/--eos_token_id`` flag arrives as a string, which never equals a token id, so
on the command line the EOS check passes whatever the output; the default (2) is an int. Here the
id is an int: pass the tokenizer's EOS id (Llama 3.1: 128009, Llama 2: 2, DeepSeek-R1: 1).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from mlharness.errors import DatasetError
from mlharness.llm.accuracy_log import TokenDtype, TokenEntry, read_entries


class Test06Result(BaseModel):
    """The three verdicts (``first_token`` None: skipped in Offline) and why each failed."""

    first_token: bool | None
    eos: bool
    sample_length: bool
    problems: list[str]

    @property
    def passed(self) -> bool:
        return self.eos and self.sample_length and self.first_token is not False

    def verify_accuracy_txt(self) -> str:
        """The text of the official ``TEST06/verify_accuracy.txt``."""
        first = "Skipped" if self.first_token is None else str(self.first_token)
        verdict = "complete" if self.passed else "failed"
        return (f"First token check pass: {first}\nEOS check pass: {self.eos}\n"
                f"Sample length check pass: {self.sample_length}\n"
                f"TEST06 verification {verdict}\n")


def _trailing_eos(tokens, eos: int) -> int:
    n, i = 0, len(tokens) - 1
    while i > 0 and tokens[i] == eos:
        n, i = n + 1, i - 1
    return n


def verify(entries: list[TokenEntry], scenario: str, eos_token_id: int,
           dtype: TokenDtype = "int32") -> Test06Result:
    """TEST06's verdicts on accuracy-log ``entries`` of a ``scenario`` run."""
    problems: list[str] = []
    eos_ok = first_ok = len_ok = True
    for e in entries:
        try:
            data = e.tokens(dtype)
        except DatasetError as exc:
            problems.append(exc.message)
            eos_ok = first_ok = len_ok = False
            continue
        n_eos = _trailing_eos(data, eos_token_id)
        if eos_ok and n_eos >= 2:
            eos_ok = False
            problems.append(f"qsl_idx {e.qsl_idx}: output ends in {n_eos} EOS tokens "
                            f"({eos_token_id}); at most one is allowed")
        if scenario != "Offline" and first_ok:
            first = e.first_tokens(dtype) if e.token_data is not None else None
            if first is None:
                first_ok = False
                problems.append(f"qsl_idx {e.qsl_idx}: no token_data (first token) logged")
            elif any(a != b for a, b in zip(data, first, strict=False)):
                first_ok = False
                n = min(len(first), len(data))
                problems.append(f"qsl_idx {e.qsl_idx}: the first token(s) reported, "
                                f"{first.tolist()}, are not the output's first {n}: "
                                f"{data[:n].tolist()}")
        if len_ok and (e.token_count is None or e.token_count != len(data)):
            len_ok = False
            problems.append(f"qsl_idx {e.qsl_idx}: reported n_tokens {e.token_count} but the "
                            f"output has {len(data)} tokens")
    return Test06Result(first_token=None if scenario == "Offline" else first_ok, eos=eos_ok,
                        sample_length=len_ok, problems=problems)


def verify_log(path: Path, scenario: str, eos_token_id: int,
               dtype: TokenDtype = "int32") -> Test06Result:
    """:func:`verify` on a run's ``mlperf_log_accuracy.json``."""
    return verify(read_entries(path), scenario, eos_token_id, dtype)
