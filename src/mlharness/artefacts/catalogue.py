"""The artefact catalogue: typed entries read from ``catalogue.toml`` (or a site's own file)."""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from mlharness.errors import ConfigError
from mlharness.files import read_toml

#: the catalogue shipped with mlharness
DEFAULT_CATALOGUE = Path(__file__).with_name("catalogue.toml")

Kind = Literal["model", "dataset", "vocabulary", "annotations", "calibration", "auxiliary"]
Access = Literal["download", "user", "gated", "bundled", "prepare"]


class Artefact(BaseModel):
    """One file or folder a benchmark needs, where it comes from and how it is verified."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    aliases: list[str] = []
    kind: Kind
    benchmarks: list[str]
    summary: str
    path: str
    access: Access = "download"
    framework: str | None = None
    precision: str | None = None
    urls: list[str] = []
    url_source: str | None = None
    md5: list[str] = []
    sha256: list[str] = []
    checksum_source: str
    unverified: str | None = None
    size: int | None = None
    unpack: Literal["zip", "tar.gz"] | None = None
    unpacked: str | None = None
    layout: Literal["imagenet", "openimages", "kits19", "coco-safe", "librispeech-repack",
                    "hf-dataset"] | None = None
    folder: bool = False
    items: int | None = None
    requires: list[str] = []
    item_url: str | None = None
    bundled: str | None = None
    obtain: str | None = None
    licence: str

    @field_validator("path", "unpacked")
    @classmethod
    def _relative(cls, value: str | None) -> str | None:
        if value is None:
            return value
        pure = PurePosixPath(value)
        if pure.is_absolute() or ".." in pure.parts or not pure.parts:
            raise ValueError(f"{value!r} must be a relative path inside the cache")
        return value

    @field_validator("md5", "sha256")
    @classmethod
    def _hex(cls, values: list[str], info: object) -> list[str]:
        length = 32 if getattr(info, "field_name", "") == "md5" else 64
        for value in values:
            if not re.fullmatch(rf"[0-9a-f]{{{length}}}", value):
                raise ValueError(f"{value!r} is not a lower-case hex digest of {length} digits")
        return values

    @model_validator(mode="after")
    def _consistent(self) -> Artefact:
        if not (self.md5 or self.sha256 or self.unverified):
            raise ValueError("needs md5 or sha256, or `unverified` saying why there is none")
        if self.access == "download" and not self.urls:
            raise ValueError("access = download needs urls")
        if self.access in ("user", "gated") and not self.obtain:
            raise ValueError(f"access = {self.access} needs `obtain` (how the user gets it)")
        if self.access == "bundled" and not self.bundled:
            raise ValueError("access = bundled needs `bundled` (its path inside mlharness)")
        if self.is_folder and self.verified:
            raise ValueError("a folder has no single digest: give `unverified` (and a layout)")
        if self.access == "prepare" and not (self.requires and self.layout):
            raise ValueError("access = prepare needs requires and layout")
        if self.access == "prepare" and self.layout == "openimages" and not self.item_url:
            raise ValueError("the openimages layout is prepared image by image: give item_url")
        if bool(self.unpack) != bool(self.unpacked):
            raise ValueError("unpack and unpacked go together")
        return self

    @property
    def verified(self) -> bool:
        """Whether a digest exists to check the bytes against."""
        return bool(self.md5 or self.sha256)

    @property
    def is_folder(self) -> bool:
        """A folder artefact (a dataset adopted with --from, a checkpoint folder)."""
        return self.folder or self.layout is not None

    def checksum_text(self) -> str:
        if self.sha256:
            return "sha256:" + self.sha256[0]
        if self.md5:
            return "md5:" + self.md5[0]
        return "unverified"


class Defaults(BaseModel):
    """What ``run`` takes from the cache for a benchmark when no path is given: a model per
    framework, the dataset and (BERT) the vocabulary, by artefact name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: dict[str, str] = {}  # none: the model runs elsewhere (an OpenAI-compatible server)
    dataset: str
    #: a scenario whose data set is another (qwen3-vl's Interactive: the 8k set)
    scenario_dataset: dict[str, str] = {}
    vocab: str | None = None
    also: dict[str, list[str]] = {}  # per framework: files the model needs beside it


class Catalogue(BaseModel):
    """Every artefact by name, and each benchmark's defaults for ``run``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    artefacts: dict[str, Artefact]
    defaults: dict[str, Defaults] = {}

    def find(self, name: str) -> Artefact | None:
        """The entry called ``name`` or with ``name`` among its aliases."""
        if name in self.artefacts:
            return self.artefacts[name]
        return next((a for a in self.artefacts.values() if name in a.aliases), None)

    def get(self, name: str) -> Artefact:
        """The entry ``name``; an unknown name is a ConfigError naming the closest ones."""
        found = self.find(name)
        if found is not None:
            return found
        close = difflib.get_close_matches(name, self.artefacts, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise ConfigError(f"no artefact named {name!r} in the catalogue",
                          hint=hint + "`mlharness get --list` shows every name")

    def for_benchmark(self, benchmark: str) -> list[Artefact]:
        return [a for a in self.artefacts.values() if benchmark in a.benchmarks]


def load_catalogue(path: Path | None = None) -> Catalogue:
    """Read and validate a catalogue file (default: ``$MLHARNESS_CATALOGUE``, a site's own,
    else the one shipped with mlharness)."""
    path = Path(path or os.environ.get("MLHARNESS_CATALOGUE") or DEFAULT_CATALOGUE)
    raw = read_toml(path, "artefact catalogue")
    entries = raw.get("artefacts")
    if not isinstance(entries, dict) or set(raw) - {"artefacts", "defaults"}:
        raise ConfigError(f"{path}: a catalogue holds only [artefacts.NAME] and "
                          "[defaults.BENCHMARK] tables",
                          hint="see docs/get.md for the format")
    artefacts = {}
    for name, body in entries.items():
        try:
            artefacts[name] = Artefact(name=name, **body)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise ConfigError(f"{path}: artefact {name!r}: {where + ': ' if where else ''}"
                              f"{first['msg']}", hint="see docs/get.md for the format") from exc
        except TypeError as exc:
            raise ConfigError(f"{path}: artefact {name!r} is not a table",
                              hint="see docs/get.md for the format") from exc
    try:
        catalogue = Catalogue(artefacts=artefacts, defaults=raw.get("defaults", {}))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ConfigError(f"{path}: {where}: {first['msg']}",
                          hint="see docs/get.md for the format") from exc
    for benchmark, chosen in catalogue.defaults.items():
        also = [name for names in chosen.also.values() for name in names]
        for name in [*chosen.model.values(), chosen.dataset, chosen.vocab, *also]:
            if name is not None and catalogue.find(name) is None:
                raise ConfigError(f"{path}: defaults.{benchmark} names {name!r}, which is not "
                                  "in the catalogue", hint="fix the name")
    return catalogue
