"""The node's shared secret: ``$MLHARNESS_NODE_TOKEN`` or a token file, read by ``mlharness
serve`` and the ``remote`` backend alike. Never logged and never written to run.json (only the
file's path is): the process that reads it registers it with ``mlharness.redact``."""

from __future__ import annotations

import os
from pathlib import Path

from mlharness.errors import ConfigError
from mlharness.redact import register

TOKEN_ENV = "MLHARNESS_NODE_TOKEN"
#: a token file holds one line: more than this is not a token (``/dev/zero`` is refused at once)
MAX_TOKEN_FILE_BYTES = 4096


def read_token(path: Path | str | None) -> str | None:
    """The token from ``path`` when given, else from ``$MLHARNESS_NODE_TOKEN``; None if neither.
    A file of more than MAX_TOKEN_FILE_BYTES, or not UTF-8, is a ConfigError (exit 2)."""
    if path is not None:
        try:
            with Path(path).open("rb") as fh:
                data = fh.read(MAX_TOKEN_FILE_BYTES + 1)
            if len(data) > MAX_TOKEN_FILE_BYTES:
                raise ConfigError(f"the token file {path} holds more than "
                                  f"{MAX_TOKEN_FILE_BYTES} bytes: not a token",
                                  hint="a text file holding the token on one line")
            token = data.decode("utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read the token file {path}: "
                              f"{getattr(exc, 'strerror', None) or exc}",
                              hint="a UTF-8 text file holding the token on one line") from exc
        if not token:
            raise ConfigError(f"the token file {path} is empty", hint="put the token in it")
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
        if not token:
            return None
    if any(ord(c) < 33 or ord(c) > 126 for c in token):
        raise ConfigError("the node token has spaces or characters outside printable ASCII",
                          hint="e.g. python -c 'import secrets; print(secrets.token_hex(32))'")
    register(token)  # masked wherever this process writes (mlharness.redact)
    return token
