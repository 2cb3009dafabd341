"""Keep-alive HTTP/1.1 connections to one LLM server, pooled, for the openai streaming client.

A request takes an idle connection (the one used last: the likeliest to be alive), or opens one;
its :class:`~mlharness.backends.openai_sse.SseResponse` reads on it and, at its end, says whether
it may carry another request (a 200 on HTTP/1.1, no ``Connection: close``, its framing read to
the end and nothing beyond: see that module). Only then does it go back to the pool; anything
else closes it. An idle connection that the server closes, or that receives a byte nobody asked
for, leaves the pool. ``prewarm(n)`` opens connections before the load begins (the backend does
so as LoadGen's test is set up, sized from its admission limit), so the first requests of a
test do not pay a TCP handshake each. ``report`` counts what was opened and reused.

A pool belongs to one event loop: taken from another (a test's second ``asyncio.run``), its
idle connections are dropped and it starts again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from mlharness.backends.openai_sse import EndpointError, SseResponse

log = logging.getLogger(__name__)


class Connection(asyncio.Protocol):
    """One connection: hands its bytes to the response being read on it (none: idle)."""

    __slots__ = ("pool", "transport", "response", "uses", "closed", "pooled")

    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.response: SseResponse | None = None
        self.uses = 0  # requests it carried (more than one: reused)
        self.closed = False
        self.pooled = False  # taken from the idle ones (the server may have closed it since)

    # -- the transport's calls ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream's: write, close

    def data_received(self, data: bytes) -> None:
        if self.response is not None:
            self.response.data_received(data)
        else:  # idle, and the server sent something: not a connection to send on
            self.close()

    def eof_received(self) -> bool | None:
        if self.response is not None:
            return self.response.eof_received()
        return None  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        response, self.response = self.response, None
        if response is not None:
            response.connection_lost(exc)

    # -- the pool's -----------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    def attach(self, response: SseResponse) -> None:
        """``response`` reads what comes next on this connection."""
        self.response = response
        self.uses += 1
        response.connection_made(self.transport)  # type: ignore[arg-type]

    def release(self, reusable: bool) -> None:
        """The response ended: back to the pool, or closed."""
        self.response = None
        if reusable and self.alive:
            self.pool.put(self)
        else:
            self.close()

    def close(self) -> None:
        self.closed = True
        self.pool.forget(self)
        if self.transport is not None:
            self.transport.close()


class ConnectionPool:
    """The idle keep-alive connections to one ``host:port``, and how many were opened and
    reused (on the loop's thread only)."""

    def __init__(self, host: str, port: int, connect_timeout_s: float) -> None:
        self.host, self.port = host, port
        self.connect_timeout_s = connect_timeout_s
        #: idle connections, the last released last (a dict: LIFO pop and O(1) removal)
        self._idle: dict[Connection, None] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.opened = 0  # connections opened (pre-warmed ones too)
        self.prewarmed = 0  # of them, opened before the load by ``prewarm``
        self.reused = 0  # requests sent on a connection that carried one before
        self.stale = 0  # requests sent again on a new connection: the reused one was closed
        self.peak_idle = 0

    def _here(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # another loop's connections cannot be used here
            for conn in list(self._idle):
                try:
                    if conn.transport is not None:
                        conn.transport.abort()
                except Exception:  # noqa: BLE001, S110 - that loop is gone; its socket with it
                    pass
            self._idle.clear()
            self._loop = loop

    async def take(self, where: str, fresh: bool = False) -> Connection:
        """An idle connection (not if ``fresh``), or a new one; EndpointError naming ``where``
        when none can be opened."""
        self._here()
        while self._idle and not fresh:
            conn, _ = self._idle.popitem()
            if conn.alive:
                self.reused += conn.uses > 0  # a pre-warmed one's first request: not reuse
                conn.pooled = True
                return conn
        return await self._open(where)

    async def _open(self, where: str) -> Connection:
        loop = asyncio.get_running_loop()
        conn = Connection(self)
        try:  # a timeout, not wait_for: no task of its own, three loop turns fewer to the send
            async with asyncio.timeout(self.connect_timeout_s):
                await loop.create_connection(lambda: conn, self.host, self.port)
        except (OSError, TimeoutError) as exc:
            raise EndpointError(f"cannot connect to {where} ({type(exc).__name__}: {exc})",
                                "is the LLM server up and listening there?") from exc
        self.opened += 1
        return conn

    def put(self, conn: Connection) -> None:
        if self._loop is asyncio.get_running_loop():
            self._idle[conn] = None
            self.peak_idle = max(self.peak_idle, len(self._idle))
        else:
            conn.close()

    def retried_stale(self, conn: Connection) -> None:
        """``conn`` was found closed by the server when its request went out: the request is
        sent again on a new one (counted as stale, not as a reuse)."""
        self.stale += 1
        self.reused -= conn.uses > 1

    def forget(self, conn: Connection) -> None:
        """``conn`` closed: out of the idle list, if there."""
        self._idle.pop(conn, None)

    async def prewarm(self, n: int, where: str) -> int:
        """Open connections until ``n`` are idle; returns how many were opened (a server that
        refuses them is told by its first request, not here)."""
        self._here()
        want = max(0, n - len(self._idle))
        results = await asyncio.gather(*(self._open(where) for _ in range(want)),
                                       return_exceptions=True)
        opened = [c for c in results if isinstance(c, Connection)]
        for conn in opened:
            self.put(conn)
        self.prewarmed += len(opened)
        if len(opened) < want:
            log.info("pre-warmed %d of %d connections to %s", len(opened), want, where)
        return len(opened)

    def close(self) -> None:
        """Close the idle connections (on the pool's loop)."""
        for conn in list(self._idle):
            conn.close()
        self._idle.clear()

    def report(self) -> dict[str, Any]:
        return {"opened": self.opened, "prewarmed": self.prewarmed, "reused": self.reused,
                "stale_retried": self.stale, "idle": len(self._idle)}
