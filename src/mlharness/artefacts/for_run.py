"""What ``run`` takes from the cache: a benchmark's official model, dataset and vocabulary
when no path is given (or a catalogue name is), and which artefacts a run used."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlharness.artefacts.cache import artefacts_root, read_stamp, status, target
from mlharness.artefacts.catalogue import Artefact, Catalogue, load_catalogue
from mlharness.artefacts.digest import algorithm
from mlharness.artefacts.errors import ArtefactError
from mlharness.errors import HarnessError

ROLES = ("model", "dataset", "vocab")


def fill_from_cache(data: dict[str, Any], framework: str | None,
                    catalogue: Catalogue | None = None) -> tuple[dict[str, Any], list[str]]:
    """``data`` (a RunSpec mapping) with its missing model/dataset/vocab — or those given as a
    catalogue name — taken from the cache; and a line per artefact taken. ``framework`` is the
    catalogue framework of the models the run's backend reads (``backends.model_framework_of``;
    None: nothing from the cache, unless the benchmark's model runs elsewhere and only its data
    set is cached: qwen3-vl's, per scenario). When the command
    names no file of its own (nothing, or only catalogue names), a needed artefact that is not
    cached is an ArtefactError whose hint is the exact ``mlharness get`` command; with a file
    of its own, the cache only fills in what it holds (the task names what is still missing)."""
    catalogue = catalogue or load_catalogue()
    defaults = catalogue.defaults.get(str(data.get("benchmark")))
    if defaults is None or (framework is None and defaults.model):
        return data, []
    dataset = defaults.scenario_dataset.get(str(data.get("scenario")), defaults.dataset)
    wanted = {"model": defaults.model.get(framework) if framework else None,
              "dataset": dataset, "vocab": defaults.vocab}
    root = artefacts_root(data.get("cache_dir"))
    own_files = any(data.get(role) is not None and _catalogue_name(data[role], catalogue) is None
                    for role in ROLES)
    data = dict(data)
    notes: list[str] = []
    missing: list[Artefact] = []
    for role in ROLES:
        given = data.get(role)
        name = wanted[role] if given is None else _catalogue_name(given, catalogue)
        if name is None:
            continue
        needed = [catalogue.get(name)]
        if role == "model" and framework:  # what the model reads beside it (BERT's bert_config)
            needed += [catalogue.get(n) for n in defaults.also.get(framework, [])]
        for artefact in needed:
            state = status(artefact, root)
            if not state.usable:
                missing.append(artefact)
            elif artefact is needed[0]:
                data[role] = state.path
                notes.append(_note(role, artefact, state.digest, state.path))
    if missing and not own_files:
        raise ArtefactError(f"{data['benchmark']} needs {', '.join(a.name for a in missing)}, "
                            f"not in the cache ({root}); nothing was run",
                            hint=get_command(missing))
    return data, notes


def _note(role: str, artefact: Artefact, digest: str | None, path: Path) -> str:
    checksum = f"{algorithm(artefact)} {digest}" if artefact.verified else (
        "layout checked" if artefact.layout else "UNVERIFIED")
    return f"{role}: {artefact.name} from the cache ({checksum}) {path}"


def _catalogue_name(given: Any, catalogue: Catalogue) -> str | None:
    """A value that is no existing path but an artefact's name or alias (``-d imagenet``)."""
    text = str(given)
    if Path(text).exists() or catalogue.find(text) is None:
        return None
    return catalogue.get(text).name


def get_command(missing: list[Artefact]) -> str:
    """The exact command(s) that fetch ``missing``."""
    plain = [a.name for a in missing if a.access not in ("user", "gated")]
    commands = [f"mlharness get {' '.join(plain)}"] if plain else []
    commands += [f"mlharness get {a.name} --from PATH ({a.obtain})" for a in missing
                 if a.access in ("user", "gated")]
    return "; then ".join(commands)


def used_by(paths: Mapping[str, Path | None], cache_dir: Path | None = None,
            catalogue: Catalogue | None = None) -> list[dict[str, Any]]:
    """The catalogue artefacts among a run's paths by role (``model``, ``dataset``, ``vocab``),
    with their name, checksum and source; ``cache_dir`` is the run's ``--cache-dir``."""
    catalogue = catalogue or load_catalogue()
    try:
        root = artefacts_root(cache_dir)
    except HarnessError:
        return []
    by_path = {target(a, root).absolute(): a for a in catalogue.artefacts.values()}
    used = []
    for role, value in paths.items():
        if value is None:
            continue
        artefact = by_path.get(Path(value).absolute())
        if artefact is None:
            continue
        stamp = read_stamp(target(artefact, root)) or {}
        checksum = (f"{algorithm(artefact)}:{stamp.get('digest')}" if artefact.verified
                    else "unverified" + (f" ({artefact.layout} layout checked)"
                                         if artefact.layout else ""))
        used.append({"role": role, "name": artefact.name, "checksum": checksum,
                     "source": stamp.get("source"), "path": str(value)})
    return used
