"""Run one LoadGen test in this process: QSL + SUT wiring, settings, StartTest.

Call ``run_test`` once per process: LoadGen loads its embedded mlperf.conf only on the first
``FromConfig`` of a process (``configCount`` in ``loadgen/test_settings_internal.cc``).
"""

from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

import mlperf_loadgen as lg

from mlharness.collector import frozen_after, held_collector
from mlharness.errors import ConfigError
from mlharness.loadgen.settings import EffectiveSettings

_SCENARIOS = {
    "SingleStream": lg.TestScenario.SingleStream,
    "MultiStream": lg.TestScenario.MultiStream,
    "Server": lg.TestScenario.Server,
    "Offline": lg.TestScenario.Offline,
}
_MODES = {"performance": lg.TestMode.PerformanceOnly, "accuracy": lg.TestMode.AccuracyOnly}

AUDIT_FILE = "audit.config"
#: the TestSettings attributes a round sets from code (``loadgen/test_settings.h``)
SEED_ATTRIBUTES = ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed", "test05",
                   "test05_qsl_rng_seed", "test05_sample_index_rng_seed",
                   "test05_schedule_rng_seed")
TRACE_FILE = "mlperf_log_trace.json"


@dataclass
class SampleLibrary:
    """The QSL side a task provides."""

    total: int
    performance: int
    load: Callable[[Sequence[int]], None]
    unload: Callable[[Sequence[int]], None]


class _Staging(threading.local):
    """A thread's reusable buffer for response bytes, with its address taken once, and the
    response objects that point into it. LoadGen copies the bytes and the responses inside
    QuerySamplesComplete (``loadgen.cc`` ResponseDelegateDetailed; the binding converts the list
    into a vector of its own), so both only have to hold until the call returns and the thread's
    next call may reuse them. Taking a fresh array's address costs more than the rest of a small
    batch's completion, and building a ``QuerySampleResponse`` costs twice setting the ``id`` of
    one already built (about 0.75 against 0.3 us here)."""

    buffer = bytearray()
    address = 0
    view: ctypes.Array[ctypes.c_char] | None = None
    #: payload size -> responses at consecutive slots of that size from ``address``
    pools: dict[int, list[lg.QuerySampleResponse]]

    def __init__(self) -> None:
        self.pools = {}

    def hold(self, data: bytes) -> int:
        """Copy ``data`` into the buffer (grown when too small); the buffer's address."""
        if len(data) > len(self.buffer):
            size = max(len(data), 2 * len(self.buffer), 4096)
            self.buffer = bytearray(size)
            # the ctypes view exports the buffer, so it can never be moved by a resize
            self.view = (ctypes.c_char * size).from_buffer(self.buffer)
            self.address = ctypes.addressof(self.view)
            self.pools.clear()  # they point into the old buffer
        self.buffer[:len(data)] = data
        return self.address

    def responses(self, ids: Sequence[int], joined: bytes, size: int) -> list:
        """Responses for ``ids`` whose payloads are ``size`` bytes each, back to back in
        ``joined`` (copied into the buffer); reused objects: valid until this thread's next
        call."""
        n = len(ids)
        base = self.hold(joined)
        pool = self.pools.get(size)
        if pool is None or len(pool) < n:
            pool = [lg.QuerySampleResponse(0, base + k * size, size)
                    for k in range(max(n, 2 * len(pool or ())))]
            self.pools[size] = pool
        for response, rid in zip(pool, ids):
            response.id = rid
        return pool if len(pool) == n else pool[:n]


_staging = _Staging()


def complete(ids: Sequence[int], payloads: Sequence[bytes]) -> None:
    """Hand responses to LoadGen (from any thread)."""
    if len(payloads) == 1:  # SingleStream, Server
        if payloads[0]:
            lg.QuerySamplesComplete(_staging.responses(ids, payloads[0], len(payloads[0])))
            return
    elif payloads and payloads[0] and len(set(map(len, payloads))) == 1:  # equal sizes
        lg.QuerySamplesComplete(_staging.responses(ids, b"".join(payloads), len(payloads[0])))
        return
    joined = b"".join(payloads)
    if not joined:
        lg.QuerySamplesComplete([lg.QuerySampleResponse(rid, 0, 0) for rid in ids])
        return
    base = _staging.hold(joined)
    responses, offset = [], 0
    for rid, payload in zip(ids, payloads):
        n = len(payload)
        responses.append(lg.QuerySampleResponse(rid, base + offset if n else 0, n))
        offset += n
    lg.QuerySamplesComplete(responses)


def first_token(rid: int, ids: Sequence[int]) -> None:
    """The first token(s) of sample ``rid`` as int32 (``FirstTokenComplete``: LoadGen's TTFT;
    TEST06 compares them with the answer's start), as every reference LLM SUT writes them."""
    buf = np.asarray(ids, dtype=np.int32)
    lg.FirstTokenComplete([lg.QuerySampleResponse(rid, buf.ctypes.data if buf.size else 0,
                                                  buf.nbytes)])
    del buf  # LoadGen copied it inside the call


def complete_generated(rid: int, payload: bytes, n_tokens: int) -> None:
    """The whole answer of sample ``rid`` (the task's encoding of its generated ids) with its
    ``n_tokens`` (LoadGen's TPOT and tokens/s); from any thread."""
    address = _staging.hold(payload) if payload else 0
    lg.QuerySamplesComplete([lg.QuerySampleResponse(rid, address, len(payload), n_tokens)])


def run_test(
    cfg: EffectiveSettings,
    user_conf: Path,
    outdir: Path,
    qsl: SampleLibrary,
    issue: Callable[[Sequence[int], Sequence[int]], None],
    flush: Callable[[], None],
    audit: bool = False,
    sut_name: str | None = None,
    seeds: Mapping[str, int] | None = None,
) -> None:
    """Run the test; LoadGen writes its logs into ``outdir``.

    ``seeds`` (a round's, ``rules.loadgen_seeds``) are set on ``TestSettings`` after
    ``FromConfig``: LoadGen reads seeds only from its compiled-in mlperf.conf, and the attributes
    set from Python win (the detail log's ``effective_*_rng_seed`` shows them).

    ``sut_name`` (a SUT reached over the network) makes the SUT a LoadGen query dispatch library
    (``ConstructQDL``, as the official ``language/bert/bert_QDL.py``) whose name LoadGen logs as
    ``sut_name``; the network division's checker looks for "Network SUT" in it.

    The process's working directory becomes ``outdir`` so that LoadGen only sees an
    ``audit.config`` we placed there on purpose (``audit=True``).
    """
    outdir = outdir.resolve()
    user_conf = user_conf.resolve()
    os.chdir(outdir)
    if (outdir / AUDIT_FILE).exists() and not audit:
        raise ConfigError(f"unexpected {AUDIT_FILE} in {outdir}",
                          hint="LoadGen would silently apply it; remove it or run a compliance test")
    settings = lg.TestSettings()
    rc = settings.FromConfig(str(user_conf), cfg.model, cfg.scenario)
    if rc != 0:
        raise ConfigError(f"LoadGen rejected {user_conf} (code {rc})",
                          hint="see mlperf_log_detail.txt for the offending line")
    settings.scenario = _SCENARIOS[cfg.scenario]
    for key, value in (seeds or {}).items():
        if key not in SEED_ATTRIBUTES:
            raise ConfigError(f"{key} is not a LoadGen seed setting",
                              hint="known: " + ", ".join(SEED_ATTRIBUTES))
        setattr(settings, key, value)
    settings.mode = _MODES[cfg.mode]

    log_output = lg.LogOutputSettings()
    log_output.outdir = str(outdir)
    log_output.copy_summary_to_stdout = False
    log_settings = lg.LogSettings()
    log_settings.log_output = log_output
    log_settings.enable_trace = cfg.trace

    if sut_name is None:
        # the "fast" SUT hands us plain id/index lists instead of QuerySample objects
        sut = lg.ConstructFastSUT(issue, flush)
        destroy = lg.DestroyFastSUT
    else:
        def issue_samples(samples: Sequence[lg.QuerySample]) -> None:
            issue([s.id for s in samples], [s.index for s in samples])

        sut = lg.ConstructQDL(issue_samples, flush, lambda: sut_name)
        destroy = lg.DestroyQDL
    lib = lg.ConstructQSL(qsl.total, qsl.performance, frozen_after(qsl.load), qsl.unload)
    try:
        with held_collector():  # no collector pass walks the model or the samples mid-test
            lg.StartTestWithLogSettings(sut, lib, settings, log_settings, AUDIT_FILE)
    finally:
        lg.DestroyQSL(lib)
        destroy(sut)
        trace = outdir / TRACE_FILE
        # LoadGen creates the file even with enable_trace off; keep it only when asked for
        if not cfg.trace and trace.is_file() and trace.stat().st_size == 0:
            trace.unlink()
