"""Artefacts the benchmarks need (models, datasets, vocabularies, calibration lists): the
catalogue (``catalogue.toml``), downloads with resume and verification into the cache,
adoption of files the user has (``--from``) and re-verification (``check``)."""

from __future__ import annotations

from mlharness.artefacts.cache import Status, artefacts_root, status, target
from mlharness.artefacts.catalogue import Artefact, Catalogue, load_catalogue
from mlharness.artefacts.download import Policy, Progress
from mlharness.artefacts.errors import ArtefactError, ChecksumMismatch, DownloadFailed
from mlharness.artefacts.check import Checked, check
from mlharness.artefacts.service import Outcome, get

__all__ = ["Artefact", "ArtefactError", "Catalogue", "Checked", "ChecksumMismatch",
           "DownloadFailed", "Outcome", "Policy", "Progress", "Status", "artefacts_root",
           "check", "get", "load_catalogue", "status", "target"]
