"""Digests of files against an artefact's published checksum."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

from mlharness.artefacts.catalogue import Artefact

BLOCK = 1 << 20


def algorithm(artefact: Artefact) -> str:
    """The strongest published algorithm (sha256 over md5); unverified entries record sha256."""
    return "md5" if artefact.md5 and not artefact.sha256 else "sha256"


def new_hash(name: str) -> "hashlib._Hash":
    return hashlib.md5(usedforsecurity=False) if name == "md5" else hashlib.sha256()


def file_digest(path: Path, name: str,
                on_bytes: Callable[[int], None] | None = None) -> str:
    """Hex digest of ``path`` with ``name`` (md5 or sha256), reporting bytes read."""
    digest = new_hash(name)
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(BLOCK), b""):
            digest.update(block)
            if on_bytes:
                on_bytes(len(block))
    return digest.hexdigest()


def accepted(artefact: Artefact) -> list[str]:
    """The published digests of ``algorithm(artefact)`` (empty: unverified)."""
    return artefact.md5 if algorithm(artefact) == "md5" else artefact.sha256


def matches(artefact: Artefact, hexdigest: str) -> bool:
    return not artefact.verified or hexdigest in accepted(artefact)


def mismatch_text(artefact: Artefact, hexdigest: str) -> str:
    want = " or ".join(accepted(artefact))
    return (f"{algorithm(artefact)} {hexdigest} is not the published {want} "
            f"(source: {artefact.checksum_source})")
