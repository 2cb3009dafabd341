"""The node's shared secret: ``$MLHARNESS_NODE_TOKEN`` or a token file, read by ``mlharness
serve`` and the ``remote`` backend alike. Never logged and never written to run.json (only the
file's path is): the process that reads it registers it with ``mlharness.redact``."""

from __future__ import annotations

import os
from pathlib import Path

from mlharness.errors import ConfigError
from mlharness.redact import register

TOKEN_ENV = "MLHARNESS_NODE_TOKEN"


def read_token(path: Path | str | None) -> str | None:
    """The token from ``path`` when given, else from ``$MLHARNESS_NODE_TOKEN``; None if neither."""
    if path is not None:
        try:
            token = Path(path).read_text(encoding="utf-8").strip()
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
