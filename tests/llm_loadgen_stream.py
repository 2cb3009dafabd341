"""LoadGen's Server scenario driving the streaming client, in a process of its own:
``python llm_loadgen_stream.py OUT_DIR SERVER_URL QUERIES QPS MODE`` (MODE: performance or
accuracy).

Each query goes to the server through ``OpenAIStreamClient`` on one asyncio loop (a single
long-lived thread, no thread per stream): ``FirstTokenComplete`` at the first token,
``QuerySamplesComplete`` with the token ids and ``n_tokens`` at the end, as an LLM SUT will.
"""

import array
import asyncio
import sys
import threading

import mlperf_loadgen as lg

from mlharness.backends.openai_stream import (
    ClientSettings,
    OpenAIStreamClient,
    StreamResult,
)

out_dir, url, queries, qps, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), \
    sys.argv[5]
loop = asyncio.new_event_loop()
threading.Thread(target=loop.run_forever, name="llm-client-loop", daemon=True).start()
client = OpenAIStreamClient(ClientSettings(base_url=url, model="m"))
keep: list[array.array] = []


def _response(query_id: int, ids: list[int], n_tokens: int) -> lg.QuerySampleResponse:
    data = array.array("i", ids)
    keep.append(data)
    return lg.QuerySampleResponse(query_id, data.buffer_info()[0], len(ids) * 4, n_tokens)


async def _one(query_id: int, index: int) -> None:
    def first(ids: list[int], ttft: float) -> None:
        lg.FirstTokenComplete([_response(query_id, ids[:1], 1)])

    def done(r: StreamResult) -> None:
        lg.QuerySamplesComplete([_response(query_id, r.token_ids, r.n_tokens)])

    await client.complete(f"sample {index}", max_tokens=64, on_first_token=first, on_done=done)


def issue(samples) -> None:
    for s in samples:
        asyncio.run_coroutine_threadsafe(_one(s.id, s.index), loop)


settings = lg.TestSettings()
settings.scenario = lg.TestScenario.Server
settings.mode = lg.TestMode.PerformanceOnly if mode == "performance" else lg.TestMode.AccuracyOnly
settings.use_token_latencies = True
settings.server_target_qps = qps
settings.min_query_count = queries
settings.max_query_count = queries
settings.min_duration_ms = 0
settings.ttft_latency = 2_000_000_000
settings.tpot_latency = 200_000_000
log = lg.LogSettings()
log.log_output.outdir = out_dir
log.log_output.copy_summary_to_stdout = False
sut = lg.ConstructSUT(issue, lambda: None)
qsl = lg.ConstructQSL(16, 16, lambda s: None, lambda s: None)
lg.StartTestWithLogSettings(sut, qsl, settings, log)
lg.DestroyQSL(qsl)
lg.DestroySUT(sut)
