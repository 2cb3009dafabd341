"""Downloads with resume (HTTP Range), retries with back-off and verification before use.

Bytes go to ``<file>.part``; only a part file whose digest is the published one is renamed
onto the file, so a half or wrong file never sits where a good one is expected.

The cache owns its files: a part file that is a link (or anything but a regular file) is removed,
never written through, and the part is opened without following links. A part as long as the
file is verified before anything is asked for (a get interrupted while hashing). A mirror is
the only source when given, so it may redirect only within itself (same scheme, host and
port); the official URLs may redirect anywhere (Zenodo does), and the stamp records where the
bytes came from. A file system that refuses a write (a full disk) ends the get at once naming
the disk and the file (exit 2, the part removed to give the space back); a server slower than
``Policy.min_rate`` bytes/s over ``Policy.rate_window_s`` (a drip) is retried as a stall is.
"""

from __future__ import annotations

import errno
import http.client
import os
import re
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable
from urllib.parse import urlsplit

from mlharness import __version__
from mlharness.artefacts.cache import part_path, remove_quietly, write_stamp
from mlharness.artefacts.catalogue import Artefact
from mlharness.artefacts.digest import algorithm, file_digest, matches, mismatch_text
from mlharness.artefacts.errors import ArtefactError, DownloadFailed


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
    #: an attempt that brings fewer than ``min_rate`` bytes/s over a window of ``rate_window_s``
    #: (at least three ``timeout_s``) is a stall too: a drip never ends otherwise
    min_rate: float = 1024.0
    rate_window_s: float = 30.0
    sleep: Callable[[float], None] = field(default=time.sleep)

    @property
    def window_s(self) -> float:
        return max(self.rate_window_s, 3 * self.timeout_s)

    def delay(self, attempt: int) -> float:
        return min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s)


class Transient(Exception):
    """Worth another attempt at the same source (5xx, dropped connection, timeout, wrong
    bytes); a ``verify`` callback raises it for a part file it refused (and deleted)."""


class _Permanent(Exception):
    """Not worth retrying this source (404, 403, ...)."""


class _WholeAlready(Exception):
    """The server says the part file already holds the whole file (416 for its end)."""


def sources(artefact: Artefact, mirror: str | None) -> list[str]:
    """The URLs to try in order: only the mirror's when one is given (air-gapped sites)."""
    if mirror:
        return [check_mirror(mirror).rstrip("/") + "/" + artefact.path]
    return list(artefact.urls)


def check_mirror(mirror: str) -> str:
    """``mirror`` when it is an http(s) URL with a host; ArtefactError (exit 2) otherwise."""
    try:
        parts = urlsplit(mirror)
        parts.port  # noqa: B018 - raises on a port out of range
    except ValueError as exc:
        raise ArtefactError(f"--mirror {mirror!r} is not a URL ({exc})",
                            hint="e.g. --mirror http://mirror.internal/mlperf") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ArtefactError(f"--mirror {mirror!r} is not an http:// or https:// URL with a host",
                            hint="e.g. --mirror http://mirror.internal/mlperf") from None
    return mirror


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects, remembering the last URL; with ``origin`` only those that stay on it
    (a mirror serves its files itself), refusing the others as ArtefactError."""

    def __init__(self, origin: tuple[str, str, int | None] | None) -> None:
        self.origin = origin
        self.final: str | None = None

    def redirect_request(self, req: urllib.request.Request, fp: object, code: int, msg: str,
                         headers: object, newurl: str) -> urllib.request.Request | None:
        if self.origin is not None and _origin(newurl) != self.origin:
            raise ArtefactError(f"the mirror redirects {req.full_url} to {newurl}, another "
                                "server: --mirror downloads from the mirror and nowhere else",
                                hint="give the server it redirects to as --mirror, if you "
                                "trust it, or make the mirror serve the files itself")
        self.final = newurl
        return super().redirect_request(req, fp, code, msg, headers, newurl)  # type: ignore[arg-type]


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


def fetch(artefact: Artefact, dest: Path, *, mirror: str | None = None,
          policy: Policy | None = None, report: Report | None = None) -> str:
    """Download ``artefact`` to ``dest`` (resuming ``dest.part``), verify it, rename it into
    place and stamp it; returns the digest. Raises DownloadFailed naming the file and why."""
    report = report or (lambda _p: None)

    def verify(part: Path, url: str) -> str:
        return _verify(artefact, part, url, report)

    digest, url = fetch_file(artefact.name, artefact.path, sources(artefact, mirror), dest,
                             verify, policy=policy, report=report, size=artefact.size,
                             same_origin=bool(mirror))
    write_stamp(dest, artefact, digest, source=url)
    report(Progress(artefact.name, "done", url=url))
    return digest


def fetch_file(name: str, what: str, urls: list[str], dest: Path,
               verify: Callable[[Path, str], str], *, policy: Policy | None = None,
               report: Report | None = None, size: int | None = None,
               same_origin: bool = False) -> tuple[str, str]:
    """Try ``urls`` in order, each with retries, resuming ``dest.part``; ``verify(part, url)``
    returns the digest or raises Transient (wrong bytes: it deletes the part). The verified
    part is renamed onto ``dest``; returns (digest, the URL that served it, with where it
    redirected to). ``same_origin``: redirects must stay on each URL's server (a mirror)."""
    policy = policy or Policy()
    report = report or (lambda _p: None)
    part = part_path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _own_part(part)
    failures: list[str] = []
    if size is not None and part.is_file() and part.stat().st_size == size and urls:
        try:  # whole already (a get interrupted while hashing): verified, not fetched again
            digest = verify(part, urls[0])
            os.replace(part, dest)
            return digest, f"{urls[0]} (resumed: the part file was complete)"
        except Transient:
            pass  # wrong bytes: verify removed the part; download as usual
    for url in urls:
        attempt = 0
        while True:
            attempt += 1
            try:
                try:
                    served = _transfer(name, url, part, policy, report, size, same_origin)
                except _WholeAlready:
                    served = f"{url} (resumed: the part file was complete)"
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
                                message=f"{url}: {exc}; attempt {attempt + 1} of "
                                f"{policy.retries + 1} in {wait:g}s"))
                policy.sleep(wait)
                continue
            os.replace(part, dest)
            return digest, served
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
        raise Transient(f"the {size:,} bytes it served for {artefact.path} were refused: "
                        f"{mismatch_text(artefact, digest)}")
    return digest


def _own_part(part: Path) -> None:
    """The part file is the cache's own regular file: a link (or a folder, a device) where it
    should be is removed (a link's target is never touched)."""
    if part.is_symlink() or (part.exists() and not part.is_file()):
        if part.is_dir() and not part.is_symlink():
            raise ArtefactError(f"{part} is a folder where the download's part file goes",
                                hint="move it away, then get again")
        part.unlink()


def _open_part(part: Path, append: bool) -> BinaryIO:
    """The part file for writing, unbuffered (a refused write is seen at once), never through a
    link (O_NOFOLLOW)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    return os.fdopen(os.open(part, flags, 0o644), "ab" if append else "wb", buffering=0)


def _transfer(name: str, url: str, part: Path, policy: Policy, report: Report,
              size: int | None, same_origin: bool = False) -> str:
    """One attempt: append to ``part`` from where it ends; raise Transient or _Permanent.
    Returns the URL as the stamp records it (with where it redirected to)."""
    _own_part(part)
    have = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": f"mlharness/{__version__}"}
    if have:
        headers["Range"] = f"bytes={have}-"
    request = urllib.request.Request(url, headers=headers)
    redirects = _Redirects(_origin(url) if same_origin else None)
    try:
        response = urllib.request.build_opener(redirects).open(request,
                                                               timeout=policy.timeout_s)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 416 and have:
            whole = _CONTENT_RANGE_TOTAL.fullmatch(exc.headers.get("Content-Range", "").strip())
            if whole and int(whole.group(1)) == have:  # complete (a get stopped while hashing)
                raise _WholeAlready() from None
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
    except ValueError as exc:  # "unknown url type": no scheme, a typo
        raise _Permanent(f"not a URL ({exc})") from None
    served = url if redirects.final is None else f"{url} (redirected to {redirects.final})"
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
        with _open_part(part, append=mode == "ab") as fh:
            rate = _Rate(policy, have)
            while True:
                try:  # read1: what has arrived (progress; no bytes lost at a stall)
                    block = response.read1(1 << 16)
                except (socket.timeout, TimeoutError) as exc:
                    raise Transient(f"no data for {policy.timeout_s:g}s at byte {have:,}"
                                    ) from exc
                except (OSError, http.client.HTTPException) as exc:
                    raise Transient(f"connection lost at byte {have:,}: {exc!r}") from exc
                if not block:
                    break
                try:
                    fh.write(block)
                except OSError as exc:
                    raise _refused_write(name, part, have, total, exc) from None
                have += len(block)
                report(Progress(name, "bytes", have, total, url))
                rate.check(have)
    if total is not None and have < total:
        raise Transient(f"connection closed at byte {have:,} of {total:,}")
    if total is not None and have > total:
        remove_quietly(part)
        raise Transient(f"received {have:,} bytes, more than the {total:,} announced")
    return served


class _Rate:
    """Raises Transient when an attempt brings fewer than ``policy.min_rate`` bytes/s over a
    window of ``policy.window_s`` (each read within the timeout, a drip all the same)."""

    def __init__(self, policy: Policy, have: int) -> None:
        self.policy = policy
        self.since, self.at = time.monotonic(), have

    def check(self, have: int) -> None:
        now = time.monotonic()
        if now - self.since < self.policy.window_s:
            return
        rate = (have - self.at) / (now - self.since)
        if rate < self.policy.min_rate:
            raise Transient(f"slower than {self.policy.min_rate:,.0f} bytes/s for "
                            f"{now - self.since:.0f}s ({rate:,.1f} bytes/s) at byte {have:,}")
        self.since, self.at = now, have


def _refused_write(name: str, part: Path, have: int, total: int | None,
                   exc: OSError) -> ArtefactError:
    """A write the file system refused (a full disk): the part removed (the space given back),
    one line naming the disk's folder and the file, exit 2."""
    remove_quietly(part)
    why = exc.strerror or str(exc)
    of = f" of {total:,}" if total else ""
    return ArtefactError(f"{name}: {why} in {part.parent} writing {part.name} at byte "
                         f"{have:,}{of}; the partial file is removed",
                         hint="free some space there, or give --cache-dir on another disk"
                         if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "check the cache "
                         "folder and its permissions, or give --cache-dir elsewhere")


_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_CONTENT_RANGE_TOTAL = re.compile(r"bytes \*/(\d+)")


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
