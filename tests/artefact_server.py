"""A real HTTP server on 127.0.0.1 (ephemeral port) serving fixture files under relative
paths, with faults queued per path: a dropped connection, wrong bytes, 404, 500, a slow
trickle, a drip (a byte every ``drip_s``), a stall, redirects (to a path of its own, or to any
URL), and a switch that turns Range support off."""

from __future__ import annotations

import re
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator


class ArtefactServer:
    """``files``: URL path (without the leading slash) -> bytes. ``fault(path, *names)`` queues
    faults for the next requests of ``path``; ``requests`` records (path, Range header)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.faults: dict[str, list[str]] = defaultdict(list)
        self.requests: list[tuple[str, str | None]] = []
        self.redirects: dict[str, str] = {}  # path -> another path (302, as Zenodo answers)
        self.ranges = True
        self.stall_s = 1.0
        self.drip_s = 0.05
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                server._serve(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def url(self, path: str) -> str:
        return f"{self.base}/{path}"

    def fault(self, path: str, *names: str) -> None:
        with self.lock:
            self.faults[path].extend(names)

    def asked(self, path: str) -> list[str | None]:
        """The Range headers of the requests for ``path``, in order (None: no Range)."""
        return [rng for p, rng in self.requests if p == path]

    def __enter__(self) -> ArtefactServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        path = h.path.lstrip("/")
        rng = h.headers.get("Range")
        with self.lock:
            self.requests.append((path, rng))
            fault = self.faults[path].pop(0) if self.faults.get(path) else None
        if path in self.redirects:
            h.send_response(302)
            target = self.redirects[path]
            h.send_header("Location", target if "://" in target else f"{self.base}/{target}")
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        if fault in ("404", "500") or path not in self.files:
            code = 500 if fault == "500" else 404
            body = b"no such file" if code == 404 else b"boom"
            h.send_response(code)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return
        data = self.files[path]
        if fault == "corrupt":
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        start = 0
        match = re.fullmatch(r"bytes=(\d+)-", rng or "")
        if self.ranges and match and int(match.group(1)) < len(data):
            start = int(match.group(1))
            h.send_response(206)
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        elif self.ranges and match:
            h.send_response(416)
            h.send_header("Content-Range", f"bytes */{len(data)}")
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        else:
            h.send_response(200)
        body = data[start:]
        h.send_header("Content-Length", str(len(body)))
        h.send_header("Content-Type", "application/octet-stream")
        h.end_headers()
        try:
            for chunk in self._chunks(body, fault):
                h.wfile.write(chunk)
                h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        if fault in ("drop", "stall", "drip"):
            h.close_connection = True

    def _chunks(self, body: bytes, fault: str | None) -> Iterator[bytes]:
        if fault == "drop":
            yield body[: len(body) // 2]  # then the connection closes: half a file
        elif fault == "stall":
            yield body[: len(body) // 3]
            time.sleep(self.stall_s)  # longer than the client's timeout
        elif fault == "drip":
            for i in range(len(body)):
                yield body[i:i + 1]
                time.sleep(self.drip_s)
        elif fault == "trickle":
            step = max(len(body) // 40, 1)
            for i in range(0, len(body), step):
                yield body[i:i + step]
                time.sleep(0.005)
        else:
            yield body
