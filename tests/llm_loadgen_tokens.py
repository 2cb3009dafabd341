"""A token-streaming SUT under the real LoadGen, in a process of its own (LoadGen's state is
process-wide): ``python llm_loadgen_tokens.py OUT_DIR SCENARIO FAULT`` runs an AccuracyOnly test
with ``use_token_latencies`` and writes LoadGen's logs to OUT_DIR.

Sample i answers ``[100 + i, 7, 8, EOS]`` (EOS = 2), the first token reported apart through
``FirstTokenComplete`` outside Offline. FAULT tampers with sample 1: ``eos`` (ends in two EOS),
``count`` (reports one token more than it sends), ``first`` (reports another first token);
``none`` leaves all alone.
"""

import array
import sys

import mlperf_loadgen as lg

out_dir, scenario, fault = sys.argv[1:4]
N, EOS = 6, 2
keep: list[array.array] = []  # LoadGen copies the bytes at completion; keep them alive until then


def _buf(ids: list[int]) -> tuple[int, int]:
    data = array.array("i", ids)
    keep.append(data)
    return data.buffer_info()[0], len(ids) * data.itemsize


def issue(samples) -> None:
    for s in samples:
        ids = [100 + s.index, 7, 8, EOS]
        n_tokens, first = len(ids), ids[:1]
        if s.index == 1 and fault == "eos":
            ids, n_tokens = ids + [EOS], len(ids) + 1
        if s.index == 1 and fault == "count":
            n_tokens += 1
        if s.index == 1 and fault == "first":
            first = [999]
        if scenario != "Offline":
            lg.FirstTokenComplete([lg.QuerySampleResponse(s.id, *_buf(first), 1)])
        lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, *_buf(ids), n_tokens)])


settings = lg.TestSettings()
settings.scenario = getattr(lg.TestScenario, scenario)
settings.mode = lg.TestMode.AccuracyOnly
settings.use_token_latencies = True
settings.server_target_qps = 1000
settings.offline_expected_qps = 1000
log = lg.LogSettings()
log.log_output.outdir = out_dir
log.log_output.copy_summary_to_stdout = False
sut = lg.ConstructSUT(issue, lambda: None)
qsl = lg.ConstructQSL(N, N, lambda s: None, lambda s: None)
lg.StartTestWithLogSettings(sut, qsl, settings, log)
lg.DestroyQSL(qsl)
lg.DestroySUT(sut)
