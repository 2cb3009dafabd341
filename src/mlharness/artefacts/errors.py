"""The errors of fetching, adopting and verifying artefacts (HarnessError subclasses)."""

from __future__ import annotations

from mlharness.errors import HarnessError


class ArtefactError(HarnessError):
    """An artefact that cannot be used: unknown, unverifiable, a bad --from path (exit 2)."""


class ChecksumMismatch(ArtefactError):
    """A file whose digest is not the published one."""


class DownloadFailed(HarnessError):
    """Every source and retry of a download failed (exit 3: nothing the input could fix)."""

    exit_code = 3
