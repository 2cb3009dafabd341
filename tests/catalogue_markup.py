"""A test-only backend whose error text holds rich markup, as a remote node's message may."""

from __future__ import annotations

from pathlib import Path

from faulty_backends import HangingLoadBackend

from mlharness.backends.base import BackendOptions

#: what the "node" says: a closing tag with nothing to close and a style tag
MARKUP_ERROR = "node 10.0.0.7 said: [/] model [red]missing[/red] at /srv/[models]"


class MarkupErrorBackend(HangingLoadBackend):
    """Fails while loading with an error text full of markup."""

    name = "markup-error"

    def load(self, model: Path | None, options: BackendOptions) -> None:
        raise RuntimeError(MARKUP_ERROR)
