"""A minimal SNTP responder (RFC 4330) serving this machine's clock, for loopback power tests.

The official power client (``-n``) and server (``ntpServer``) both ask an NTP server over UDP
port 123 before every measurement (``ptd_client_server/lib/time_sync.py``). On one machine the
answer is trivially "in sync"; this responder gives it without an NTP daemon. Port 123 needs
root (or CAP_NET_BIND_SERVICE). Not a time source for real measurements: use a real NTP server
on the director's network for those.

Run: ``python -m mlharness.power.ntp [--host 127.0.0.1] [--port 123]``.
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import threading
import time

NTP_DELTA = 2208988800  # seconds from 1900-01-01 (NTP era 0) to 1970-01-01


def _ntp_time(t: float) -> bytes:
    secs = int(t) + NTP_DELTA
    frac = int((t - int(t)) * (1 << 32)) & 0xFFFFFFFF
    return struct.pack("!II", secs, frac)


def answer(request: bytes, received: float) -> bytes:
    """A server-mode (4) reply, stratum 1, echoing the client's transmit time as originate."""
    version = (request[0] >> 3) & 0x7 if request else 4
    originate = request[40:48] if len(request) >= 48 else b"\0" * 8
    head = struct.pack("!BBbb", (0 << 6) | (version << 3) | 4, 1, 0, -20)
    root = struct.pack("!II", 0, 0) + b"LOCL"
    ref = _ntp_time(received)
    return head + root + ref + originate + _ntp_time(received) + _ntp_time(time.time())


class Responder:
    """Serve SNTP on ``host:port`` in a daemon thread (``start``/``stop``) or in the foreground."""

    def __init__(self, host: str = "127.0.0.1", port: int = 123) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))  # PermissionError / OSError when not allowed or taken
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, addr = self.sock.recvfrom(512)
            except socket.timeout:
                continue
            except OSError:
                break
            self.sock.sendto(answer(data, time.time()), addr)

    def start(self) -> Responder:
        self._thread = threading.Thread(target=self.serve, name="ntp-responder", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=2)
        self.sock.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ntp-responder", description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=123)
    args = p.parse_args(argv)
    r = Responder(args.host, args.port)
    print(f"SNTP responder on {args.host}:{args.port} (this machine's clock)", flush=True)
    try:
        r.serve()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
