"""Downloads with resume (HTTP Range), retries with back-off and verification before use.

Bytes go to ``<file>.part``; only a part file whose digest is the published one is renamed
onto the file, so a half or wrong file never sits where a good one is expected.
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from mlharness import __version__
from mlharness.artefacts.cache import part_path, remove_quietly, write_stamp
from mlharness.artefacts.catalogue import Artefact
from mlharness.artefacts.digest import algorithm, file_digest, matches, mismatch_text
from mlharness.artefacts.errors import DownloadFailed


@dataclass(frozen=True)
class Progress:
    """A download event for the caller's display (only cli/ prints)."""

    name: str
    event: str  # start | bytes | retry | verify | done
    done: int = 0
    total: int | None = None
    url: str = ""
    message: str = ""


Report = Callable[[Progress], None]


@dataclass
class Policy:
    """How hard to try: attempts per source, back-off, socket timeout."""

    retries: int = 4
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    timeout_s: float = 30.0
    sleep: Callable[[float], None] = field(default=time.sleep)

    def delay(self, attempt: int) -> float:
        return min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s)


class Transient(Exception):
    """Worth another attempt at the same source (5xx, dropped connection, timeout, wrong
    bytes); a ``verify`` callback raises it for a part file it refused (and deleted)."""


class _Permanent(Exception):
    """Not worth retrying this source (404, 403, ...)."""


def sources(artefact: Artefact, mirror: str | None) -> list[str]:
    """The URLs to try in order: only the mirror's when one is given (air-gapped sites)."""
    if mirror:
        return [mirror.rstrip("/") + "/" + artefact.path]
    return list(artefact.urls)


def fetch(artefact: Artefact, dest: Path, *, mirror: str | None = None,
          policy: Policy | None = None, report: Report | None = None) -> str:
    """Download ``artefact`` to ``dest`` (resuming ``dest.part``), verify it, rename it into
    place and stamp it; returns the digest. Raises DownloadFailed naming the file and why."""
    report = report or (lambda _p: None)

    def verify(part: Path, url: str) -> str:
        return _verify(artefact, part, url, report)

    digest, url = fetch_file(artefact.name, artefact.path, sources(artefact, mirror), dest,
                             verify, policy=policy, report=report, size=artefact.size)
    write_stamp(dest, artefact, digest, source=url)
    report(Progress(artefact.name, "done", url=url))
    return digest


def fetch_file(name: str, what: str, urls: list[str], dest: Path,
               verify: Callable[[Path, str], str], *, policy: Policy | None = None,
               report: Report | None = None, size: int | None = None) -> tuple[str, str]:
    """Try ``urls`` in order, each with retries, resuming ``dest.part``; ``verify(part, url)``
    returns the digest or raises Transient (wrong bytes: it deletes the part). The verified
    part is renamed onto ``dest``; returns (digest, the URL that served it)."""
    policy = policy or Policy()
    report = report or (lambda _p: None)
    part = part_path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    for url in urls:
        attempt = 0
        while True:
            attempt += 1
            try:
                _transfer(name, url, part, policy, report, size)
                digest = verify(part, url)
            except _Permanent as exc:
                failures.append(f"{url}: {exc}")
                break
            except Transient as exc:
                failures.append(f"{url}: {exc}")
                if attempt > policy.retries:
                    break
                wait = policy.delay(attempt)
                report(Progress(name, "retry", url=url,
                                message=f"{exc}; attempt {attempt + 1} of "
                                f"{policy.retries + 1} in {wait:g}s"))
                policy.sleep(wait)
                continue
            os.replace(part, dest)
            return digest, url
    last = failures[-1] if failures else "no source to download from"
    raise DownloadFailed(f"{name}: could not download {what}: {last}",
                         hint=_hint(name, failures, urls, part.exists()))


def _hint(name: str, failures: list[str], urls: list[str], partial: bool) -> str:
    where = f"{len(urls)} URLs" if len(urls) != 1 else urls[0]
    kept = "; the partial file is kept and the next `mlharness get` resumes it" if partial else ""
    return (f"{len(failures)} attempt(s) at {where} failed{kept}; "
            f"`mlharness get {name} --from FILE` adopts a copy you have")


def _verify(artefact: Artefact, part: Path, url: str, report: Report) -> str:
    size = part.stat().st_size
    report(Progress(artefact.name, "verify", 0, size, url))
    done = 0

    def on_bytes(n: int) -> None:
        nonlocal done
        done += n
        report(Progress(artefact.name, "verify", done, size, url))

    digest = file_digest(part, algorithm(artefact), on_bytes)
    if not matches(artefact, digest):
        remove_quietly(part)  # wrong bytes: never resumed, fetched again from the start
        raise Transient(f"downloaded file refused: {mismatch_text(artefact, digest)}")
    return digest


def _transfer(name: str, url: str, part: Path, policy: Policy, report: Report,
              size: int | None) -> None:
    """One attempt: append to ``part`` from where it ends; raise Transient or _Permanent."""
    have = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": f"mlharness/{__version__}"}
    if have:
        headers["Range"] = f"bytes={have}-"
    request = urllib.request.Request(url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=policy.timeout_s)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 416 and have:
            remove_quietly(part)  # the part is not a prefix the server knows: start again
            raise Transient(f"HTTP 416 for a resume at byte {have:,}; starting over") from None
        text = f"HTTP {exc.code} {exc.reason}"
        if exc.code in (408, 425, 429) or exc.code >= 500:
            raise Transient(text) from None
        raise _Permanent(text) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, socket.gaierror):  # no such host (or no DNS: an air-gapped site)
            raise _Permanent(f"cannot resolve the host: {reason}") from None
        raise Transient(f"cannot connect: {reason}") from None
    with response:
        total, mode = _range_of(response, have)
        if mode == "wb-restart":
            remove_quietly(part)
            raise Transient("the server resumed at another byte than asked; starting over")
        if mode == "wb":
            have = 0
        if size is not None and total is not None and total != size:
            raise _Permanent(f"serves {total:,} bytes, the catalogue says {size:,}")
        report(Progress(name, "start", have, total, url))
        try:
            with part.open(mode) as fh:
                while True:
                    # read1: what has arrived (progress; no bytes lost at a stall)
                    block = response.read1(1 << 16)
                    if not block:
                        break
                    fh.write(block)
                    have += len(block)
                    report(Progress(name, "bytes", have, total, url))
        except (socket.timeout, TimeoutError) as exc:
            raise Transient(f"no data for {policy.timeout_s:g}s at byte {have:,}") from exc
        except (OSError, http.client.HTTPException) as exc:
            raise Transient(f"connection lost at byte {have:,}: {exc!r}") from exc
    if total is not None and have < total:
        raise Transient(f"connection closed at byte {have:,} of {total:,}")
    if total is not None and have > total:
        remove_quietly(part)
        raise Transient(f"received {have:,} bytes, more than the {total:,} announced")


_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


def _range_of(response: http.client.HTTPResponse, have: int) -> tuple[int | None, str]:
    """(the file's full size if known, the part file's open mode: append or rewrite)."""
    length = response.headers.get("Content-Length")
    if response.status == 206:
        match = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
        if not match or int(match.group(1)) != have:
            return None, "wb-restart"
        return (int(match.group(3)) if match.group(3) != "*" else None), "ab"
    # 200: the whole file (a server without Range support ignores the header)
    return (int(length) if length and length.isdigit() else None), "wb"


__all__ = ["Policy", "Progress", "Report", "Transient", "fetch", "fetch_file", "sources"]
