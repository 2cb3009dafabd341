"""A scripted OpenAI-compatible ``/v1/audio/transcriptions`` server for the tests (vLLM's
streaming form): it answers each clip with the transcript the test gave for its bytes, as
server-sent events (text pieces, then a usage chunk, then ``[DONE]``), and keeps the forms it
received."""

from __future__ import annotations

import hashlib
import json
import threading
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # the openai backend opens up to 256 connections at once
    daemon_threads = True


class TranscriptionServer:
    """``answers``: sha256 of a clip's bytes -> (text, completion_tokens). ``hostile``: how the
    server misbehaves instead of answering: ``"stall"`` (headers, then nothing), ``"huge"`` (an
    event of 2 MiB), ``"endless"`` (events without text, forever)."""

    def __init__(self, answers: dict[str, tuple[str, int]], usage: bool = True,
                 hostile: str | None = None) -> None:
        self.answers, self.usage, self.hostile = answers, usage, hostile
        self.stop = threading.Event()
        self.forms: list[dict[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                message = BytesParser(policy=HTTP).parsebytes(
                    f"Content-Type: {self.headers['Content-Type']}\r\n\r\n".encode() + body)
                form, clip = {}, b""
                for part in message.iter_parts():
                    name = part.get_param("name", header="content-disposition")
                    if name == "file":
                        clip = part.get_payload(decode=True)
                    else:
                        form[name] = part.get_payload(decode=True).decode()
                server.forms.append(form)
                found = server.answers.get(hashlib.sha256(clip).hexdigest())
                if self.path != "/v1/audio/transcriptions" or found is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                text, tokens = found
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                if server.hostile is not None:
                    self._misbehave(server.hostile)
                    return
                third = max(1, len(text) // 3)
                events = [{"choices": [{"delta": {"content": text[i:i + third]}}]}
                          for i in range(0, len(text), third)]
                if server.usage:
                    events.append({"choices": [], "usage": {"prompt_tokens": 4,
                                                            "completion_tokens": tokens}})
                for data in [json.dumps(e) for e in events] + ["[DONE]"]:
                    chunk = f"data: {data}\n\n".encode()
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _misbehave(self, how: str) -> None:
                try:
                    if how == "stall":
                        self.wfile.flush()
                        server.stop.wait(30)
                    elif how == "huge":
                        self._chunk(b'data: {"choices": [{"delta": {"content": "'
                                    + b"a" * (2 << 20) + b'"}}]}\n\n')
                    elif how == "endless":
                        while not server.stop.is_set():
                            self._chunk(b'data: {"choices": [{"delta": {}}]}\n\n')
                except OSError:
                    pass  # the client hung up, as it should

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> TranscriptionServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()
