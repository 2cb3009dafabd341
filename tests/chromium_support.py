"""Open a page in real headless Chromium over the DevTools protocol (``--remote-debugging-pipe``:
JSON messages separated by NUL on file descriptors 3 and 4, no extra packages) and report what a
user would see: console errors, uncaught exceptions, failed or network loads, a screenshot and
the result of a DOM query.

Chromium is Debian's ``chromium`` package. ``ensure_chromium`` installs it with apt-get when it
is missing and we are root (CI runs as root on a fresh machine); otherwise it says why it cannot.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--host-resolver-rules=MAP * ~NOTFOUND"]  # no name resolves


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


def ensure_chromium() -> tuple[str | None, str]:
    """(path, "") or (None, why it is not available)."""
    path = find_chromium()
    if path:
        return path, ""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return None, ("Chromium is not installed and this user cannot install it "
                      "(needs root and apt-get): run `apt-get install chromium`")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    steps = (["apt-get", "update"],
             ["apt-get", "install", "-y", "--no-install-recommends", "chromium"])
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if proc.returncode != 0:
            return None, (f"`{' '.join(cmd)}` failed (exit {proc.returncode}): "
                          f"{(proc.stderr or proc.stdout).strip()[-400:]}")
    path = find_chromium()
    return (path, "") if path else (None, "apt-get installed chromium but no binary was found")


@dataclass
class PageReport:
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, failed loads
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    dom: Any = None  # the value of the evaluated expression
    screenshot: bytes = b""


class _Pipe:
    def __init__(self, binary: str, profile: str) -> None:
        cmd_r, self._cmd_w = os.pipe()
        self._resp_r, resp_w = os.pipe()
        # above 4, so that putting them on 3 and 4 in the child cannot clobber one another
        high_r, high_w = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (cmd_r, resp_w))
        os.close(cmd_r)
        os.close(resp_w)

        def child_fds() -> None:  # in the child: fds 3 and 4 are the protocol pipe (inheritable)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        # close_fds=False: closing "other" fds happens after preexec_fn and would close 3 and 4;
        # every other fd of ours is close-on-exec anyway
        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe",
             "about:blank"], preexec_fn=child_fds, close_fds=False,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(high_r)
        os.close(high_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 60) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        want = self._id
        deadline = time.monotonic() + timeout
        while True:
            for m in self._read(deadline):
                if m.get("id") == want:
                    if "error" in m:
                        raise RuntimeError(f"{method}: {m['error']}")
                    return m.get("result", {})
                self.events.append(m)

    def wait_event(self, method: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self.events):
            self.events += self._read(deadline)

    def drain(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                self.events += self._read(end)
            except TimeoutError:
                return

    def _read(self, deadline: float) -> list[dict[str, Any]]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("Chromium did not answer in time")
            ready, _, _ = select.select([self._resp_r], [], [], left)
            if ready:
                chunk = os.read(self._resp_r, 1 << 20)
                if not chunk:
                    raise RuntimeError("Chromium closed the DevTools pipe")
                self._buf += chunk
        *msgs, self._buf = self._buf.split(b"\0")
        return [json.loads(m) for m in msgs if m]

    def close(self) -> None:
        try:
            os.write(self._cmd_w, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(10)
        for fd in (self._cmd_w, self._resp_r):
            try:
                os.close(fd)
            except OSError:
                pass


def open_page(binary: str, url: str, expression: str, width: int = 1280) -> PageReport:
    """Load ``url``, wait for it to load, evaluate ``expression`` (a JSON-returning JS
    expression) and take a full-page screenshot."""
    report = PageReport()
    with tempfile.TemporaryDirectory(prefix="mlh-chromium-") as profile:
        pipe = _Pipe(binary, profile)
        try:
            targets = pipe.send("Target.getTargets")["targetInfos"]
            page = next(t for t in targets if t["type"] == "page")
            session = pipe.send("Target.attachToTarget",
                                {"targetId": page["targetId"], "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                pipe.send(f"{domain}.enable", session=session)
            pipe.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900,
                      "deviceScaleFactor": 1, "mobile": False}, session=session)
            pipe.events.clear()
            pipe.send("Page.navigate", {"url": url}, session=session)
            pipe.wait_event("Page.loadEventFired")
            pipe.drain(0.5)  # late console messages
            value = pipe.send("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                              session=session)
            report.dom = json.loads(value["result"]["value"])
            height = pipe.send("Page.getLayoutMetrics", session=session)["cssContentSize"]["height"]
            pipe.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": int(height),
                      "deviceScaleFactor": 1, "mobile": False}, session=session)
            shot = pipe.send("Page.captureScreenshot", {"format": "png"}, session=session)
            report.screenshot = base64.b64decode(shot["data"])
        finally:
            pipe.close()
    for e in pipe.events:
        method, params = e.get("method"), e.get("params", {})
        if method == "Runtime.exceptionThrown":
            d = params["exceptionDetails"]
            report.errors.append(f"exception: {(d.get('exception') or {}).get('description') or d.get('text')}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
            report.errors.append(f"console.{params['type']}: {args}")
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            report.errors.append(f"log: {params['entry']['text']} {params['entry'].get('url', '')}")
        elif method == "Network.loadingFailed":
            report.errors.append(f"load failed: {params.get('errorText')}")
        elif method == "Network.requestWillBeSent":
            report.requests.append(params["request"]["url"])
    return report
