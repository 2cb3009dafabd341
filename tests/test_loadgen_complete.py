"""The completion's reused responses (loadgen/session.py): ids and bytes right on every call."""

from __future__ import annotations

import ctypes
import threading

from mlharness.loadgen.session import _Staging


def _read(responses) -> list[tuple[int, bytes]]:
    return [(r.id, ctypes.string_at(r.data, r.size)) for r in responses]


def test_responses_point_at_each_payload_and_are_reused_across_calls() -> None:
    staging = _Staging()
    first = staging.responses([10, 11, 12], b"aaaabbbbcccc", 4)
    assert _read(first) == [(10, b"aaaa"), (11, b"bbbb"), (12, b"cccc")]
    again = staging.responses([20], b"zzzz", 4)  # fewer: the same objects, new ids and bytes
    assert _read(again) == [(20, b"zzzz")] and again[0] is first[0]
    other = staging.responses([30, 31], b"xxyy", 2)  # another size: a pool of its own
    assert _read(other) == [(30, b"xx"), (31, b"yy")]
    big = staging.responses(list(range(5000)), bytes(range(250)) * 80, 4)  # the buffer grows
    assert _read(big)[4999] == (4999, (bytes(range(250)) * 80)[-4:])
    assert _read(staging.responses([1, 2], b"ppppqqqq", 4)) == [(1, b"pppp"), (2, b"qqqq")]


def test_each_thread_has_its_own_buffer_and_responses() -> None:
    staging = _Staging()
    mine = staging.responses([1], b"mine", 4)
    seen: list = []
    thread = threading.Thread(target=lambda: seen.extend(staging.responses([2], b"them", 4)))
    thread.start()
    thread.join()
    assert seen[0] is not mine[0] and seen[0].data != mine[0].data
    assert _read(mine) == [(1, b"mine")]
