"""Secrets kept out of everything mlharness writes or prints: the one place that scrubs them.

What is a secret: every value registered in this process (an LLM server's API key, read from
the environment variable the backend option ``api_key_env`` names; a serve node's token), the
user and password of a URL (``http://user:pass@host`` → ``http://***@host``), and the value of
an ``Authorization`` header or a ``Bearer`` token a server echoes. Each becomes ``***``.

Every writer passes its text through :func:`scrub` (or :func:`scrub_data` for a JSON value):
the run's record (``RunRecord.to_dict``: ``run.json`` and everything shown from it), the result
index's rows (``store``), the consoles of ``cli`` (a :class:`ScrubbedStream` each), and in every
process that calls :func:`guard_output` (the CLI and a run's worker) its log records and the
tracebacks of uncaught exceptions (``--debug``, a thread's); the run's worker also writes its
stderr through a :class:`ScrubbedStream`. A process registers a secret where it reads it, so
the value is known before anything could carry it out.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import traceback
from types import TracebackType
from typing import Any, Callable, TextIO

MASK = "***"
#: shorter values are not secrets worth scrubbing (and would mask ordinary words)
MIN_SECRET = 6

#: ``scheme://user:pass@`` (the userinfo of a URL's authority; no ``/``, space or quote in it)
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@\"'<>]+@")
#: an ``Authorization`` header's value (``authorization: ...``, ``"Authorization": "..."``)
_AUTH_HEADER = re.compile(r"""(?i)(\bauthorization["']?\s*[:=]\s*["']?)[^"'\r\n,;}\]]+""")
#: a bearer token: ``Bearer`` then 8 characters or more, one of them a digit or punctuation
#: (keys and JWTs have them; "the standard bearer of his party" keeps its words)
_BEARER = re.compile(r"(\b(?:[Bb]earer|BEARER)\s+)"
                     r"(?=[^\s\"',;}\]\\]*[0-9._~+/=-])[^\s\"',;}\]\\]{8,}")

_lock = threading.Lock()
_secrets: tuple[str, ...] = ()  # longest first, so a key holding another is masked whole


def register(value: str | None) -> None:
    """Treat ``value`` as a secret in this process from now on (ignored when short)."""
    global _secrets
    if not value or len(value) < MIN_SECRET:
        return
    with _lock:
        if value not in _secrets:
            _secrets = tuple(sorted({*_secrets, value}, key=len, reverse=True))


def register_env(name: str | None) -> None:
    """Register the value of environment variable ``name`` (nothing when unset)."""
    if name:
        register(os.environ.get(name))


def register_url(url: str) -> None:
    """Register the password (and user) of ``url``'s userinfo, when it has one."""
    match = re.match(r"(?i)[a-z][a-z0-9+.-]*://([^/\s@]+)@", url.strip())
    if match:
        user, _, password = match.group(1).partition(":")
        register(password)
        register(user)


def scrub(text: str) -> str:
    """``text`` with every secret masked."""
    if not text:
        return text
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    if "@" in text:
        text = _URL_USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)
    text = _AUTH_HEADER.sub(lambda m: m.group(1) + MASK, text)
    return _BEARER.sub(lambda m: m.group(1) + MASK, text)


def scrub_data(value: Any) -> Any:
    """A JSON-like value (dicts, lists, tuples, strings, numbers) with every string scrubbed."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrub_data(k): scrub_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(scrub_data(v) for v in value)
    return value


class ScrubbedStream:
    """A text stream whose writes are scrubbed on their way to ``target()`` (e.g. the
    ``sys.stderr`` of the moment: tests swap it); everything else is the target's."""

    def __init__(self, target: Callable[[], TextIO]) -> None:
        self._target = target

    def write(self, text: str) -> int:
        return self._target().write(scrub(text))

    def __getattr__(self, attr: str) -> Any:  # isatty, fileno, flush, encoding ...
        if attr == "rich_proxied_file":  # rich must not look past this stream
            raise AttributeError(attr)
        return getattr(self._target(), attr)


class _ScrubbedRecord(logging.LogRecord):
    """A log record whose message and traceback text are scrubbed once formatted."""

    def getMessage(self) -> str:  # noqa: N802 - logging's name
        return scrub(super().getMessage())


def guard_output() -> None:
    """Scrub every log record of this process (its message and traceback) and the traceback of
    every uncaught exception (the process's, ``--debug``; a thread's)."""
    logging.setLogRecordFactory(_factory)
    sys.excepthook = _excepthook
    threading.excepthook = _thread_excepthook


def _excepthook(kind: type[BaseException], exc: BaseException,
                tb: TracebackType | None) -> None:
    sys.stderr.write(scrub("".join(traceback.format_exception(kind, exc, tb))))


def _thread_excepthook(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit or args.exc_value is None:
        return
    name = args.thread.name if args.thread is not None else "?"
    sys.stderr.write(scrub(f"Exception in thread {name}:\n" + "".join(
        traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))))


_base_factory = logging.getLogRecordFactory()


def _factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
    record = _base_factory(*args, **kwargs)
    if record.exc_info and not record.exc_text:
        record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
    record.__class__ = _ScrubbedRecord
    return record
