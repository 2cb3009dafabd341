"""The node's wire format (protocol/wire.py): what the server refuses and what round-trips."""

from __future__ import annotations

import numpy as np
import pytest

from mlharness.protocol import wire


def test_indices_round_trip_and_refusals() -> None:
    assert wire.decode_indices(wire.encode_indices([0, 7, 3]), total=8) == [0, 7, 3]
    for body in (b"", b"\x00" * 7, wire.encode_indices([8]), wire.encode_indices([-1])):
        with pytest.raises(wire.WireError):
            wire.decode_indices(body, total=8)


def test_responses_round_trip_with_unequal_lengths() -> None:
    payloads = [b"", b"abc", np.arange(3, dtype=np.float32).tobytes()]
    body = wire.encode_responses(payloads)
    assert wire.decode_responses(body, 3) == payloads
    for bad in (body[:-1], body + b"x", body[:10]):
        with pytest.raises(wire.WireError):
            wire.decode_responses(bad, 3)
