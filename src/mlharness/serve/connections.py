"""What a node gives a TCP connection: a place among at most ``max_connections`` open ones, and
``header_timeout_s`` to send each request's line and headers. Without them idle connections
were never closed: 20,000 of them (no token needed to open one) took the node's file
descriptors and a legitimate run failed.

A connection beyond the limit is answered ``503`` and closed at once; one that sends no whole
request head in time (nothing at all, or a byte now and then) is closed. Between requests a
run's connection stays open as before (uvicorn's keep-alive timeout, 600 s): the head timeout
runs only while a request is due and incomplete.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mlharness.hostinfo import spare_descriptors

#: connections a node holds at most by default (and never more than half its file descriptors)
DEFAULT_MAX_CONNECTIONS = 1000
#: seconds a connection has to send a request's line and headers
DEFAULT_HEADER_TIMEOUT_S = 10.0

_FULL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n"
         b"Content-Length: 54\r\n\r\nthis node holds its most connections; try again later\n")


def default_max_connections() -> int:
    """DEFAULT_MAX_CONNECTIONS, or half the process's file descriptor limit when lower (the
    node's model, dataset and threads need the rest)."""
    spare = spare_descriptors()
    if spare is None:
        return DEFAULT_MAX_CONNECTIONS
    return max(16, min(DEFAULT_MAX_CONNECTIONS, spare))


def limited_protocol(max_connections: int, header_timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol holding at most ``max_connections`` connections, each
    closed when a request's head takes longer than ``header_timeout_s``."""
    # lazy: uvicorn loads with the node, never for `mlharness --help`
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class LimitedProtocol(HttpToolsProtocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                transport.write(_FULL)
                transport.close()
                return
            self._arm()

        def _arm(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(header_timeout_s, self._too_slow)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _too_slow(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                self.transport.close()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Any) -> None:
            self._disarm()
            super().connection_lost(exc)

    return LimitedProtocol
