"""``mlharness get`` for whisper: the LibriSpeech archives as the reference's
inference_librispeech.csv names them (URL, md5), the dataset built from them as
download_dataset.sh builds it (served here by a local server from the session's espeak-ng
LibriSpeech tree), a folder adopted with --from and checked against its manifest, and the
model adopted UNVERIFIED."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest
import referee
import whisper_fixtures as wf
from artefact_server import ArtefactServer
from extras import has_extra

from mlharness.artefacts import ArtefactError, Policy, check, get, load_catalogue, status
from mlharness.speech.manifest import MANIFEST_NAME

pytestmark = pytest.mark.skipif(not has_extra("soundfile"), reason="soundfile missing")

FAST = Policy(retries=1, backoff_s=0.001, timeout_s=5.0)


@referee.official("speech2text/utils/inference_librispeech.csv")
def test_the_archives_are_the_references():
    """URL and md5 of each archive as utils/inference_librispeech.csv gives them (the file
    download_dataset.sh hands to download_librispeech.py)."""
    rows = list(csv.DictReader(
        (referee.INFERENCE / "speech2text/utils/inference_librispeech.csv").open()))
    catalogue = load_catalogue()
    for row in rows:
        subset = Path(row["url"]).name.removesuffix(".tar.gz")
        entry = catalogue.get(f"librispeech-{subset}")
        assert entry.urls[0] == row["url"] and entry.md5 == [row["md5"]]
        assert entry.unpack == "tar.gz" and "whisper" in entry.benchmarks
    dataset = catalogue.get("librispeech")
    assert dataset.name == "whisper-librispeech" and dataset.items == 1633
    assert dataset.requires == ["librispeech-dev-clean", "librispeech-dev-other"]
    model = catalogue.get("whisper-large-v3")
    assert model.access == "gated" and not model.verified and model.unverified
    assert catalogue.defaults["whisper"].model == {"hf": "whisper-large-v3"}


def _archive(librispeech: Path, subset: str) -> bytes:
    """``<subset>.tar.gz`` as openslr.org lays it out: ``LibriSpeech/<subset>/...``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        tf.add(librispeech / subset, arcname=f"LibriSpeech/{subset}")
    return buf.getvalue()


def _catalogue(tmp: Path, base: str, archives: dict[str, bytes], items: int) -> Path:
    """The shipped whisper entries, their URLs and digests pointed at the local server's."""
    text = []
    for subset, data in archives.items():
        text.append(f"""
[artefacts.librispeech-{subset}]
kind = "dataset"
benchmarks = ["whisper"]
summary = "{subset}"
path = "datasets/librispeech/{subset}.tar.gz"
urls = ["{base}/resources/12/{subset}.tar.gz"]
md5 = ["{hashlib.md5(data).hexdigest()}"]
checksum_source = "test fixture"
unpack = "tar.gz"
unpacked = "datasets/librispeech/{subset}"
licence = "CC BY 4.0"
""")
    shipped = load_catalogue()
    for name in ("whisper-librispeech", "whisper-large-v3"):
        entry = shipped.get(name).model_dump(exclude={"name"}, exclude_defaults=True)
        if name == "whisper-librispeech":
            entry["items"] = items
        text.append(f"[artefacts.{name}]\n" + "".join(
            f"{key} = {json.dumps(value)}\n" for key, value in entry.items()))
    path = tmp / "catalogue.toml"
    path.write_text("".join(text))
    return path


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    data = wf.session_data(tmp_path_factory)
    archives = {subset: _archive(data["librispeech"], subset)
                for subset in ("dev-clean", "dev-other")}
    with ArtefactServer() as server:
        for subset, body in archives.items():
            server.files[f"resources/12/{subset}.tar.gz"] = body
        tmp = tmp_path_factory.mktemp("whisper_get")
        clips = len(json.loads(data["manifest"].read_text()))
        yield {"server": server, "data": data, "tmp": tmp,
               "catalogue": load_catalogue(_catalogue(tmp, server.base, archives, clips))}


def test_get_builds_the_dataset_as_download_dataset_sh(served, tmp_path):
    """Both archives downloaded, verified and unpacked, then repacked: the manifest and every
    clip equal what the repack of the same LibriSpeech tree writes; a second get fetches
    nothing; --check re-checks the folder against its manifest."""
    catalogue, root = served["catalogue"], tmp_path / "artefacts"
    events: list = []
    out = get(catalogue.get("librispeech"), root, policy=FAST, report=events.append,
              catalogue=catalogue)
    assert out.action == "prepared" and not out.verified
    expected = served["data"]["data"]
    assert json.loads((out.path / MANIFEST_NAME).read_text()) == json.loads(
        (expected / MANIFEST_NAME).read_text())
    for clip in sorted((expected / "dev-all-repack").iterdir()):
        assert (out.path / "dev-all-repack" / clip.name).read_bytes() == clip.read_bytes()
    assert any(e.event == "items" and e.message == "chapters repacked" for e in events)
    assert status(catalogue.get("whisper-librispeech"), root).state == "checked"
    [verdict] = check(catalogue, root, ["whisper-librispeech"])
    assert verdict.state == "ok" and verdict.detail.startswith("4 clips")
    asked = len(served["server"].requests)
    again = get(catalogue.get("whisper-librispeech"), root, policy=FAST, catalogue=catalogue)
    assert again.action == "cached" and len(served["server"].requests) == asked
    assert not [p for p in root.rglob("*") if p.name.endswith((".part", ".tmp"))]


def test_from_adopts_a_repacked_folder_checked_against_its_manifest(served, tmp_path):
    catalogue, root = served["catalogue"], tmp_path / "artefacts"
    mine = tmp_path / "mine"
    shutil.copytree(served["data"]["data"], mine)
    out = get(catalogue.get("whisper-librispeech"), root, source=mine, catalogue=catalogue)
    assert out.action == "adopted" and out.path.resolve() == mine.resolve()
    assert status(catalogue.get("whisper-librispeech"), root).state == "checked"
    (mine / "dev-all-repack" / "84-121123_1.wav").unlink()
    with pytest.raises(ArtefactError, match="84-121123_1.wav"):
        get(catalogue.get("whisper-librispeech"), root, source=mine, catalogue=catalogue)
    with pytest.raises(ArtefactError, match="no dev-all-repack.json"):
        get(catalogue.get("whisper-librispeech"), root, source=tmp_path, catalogue=catalogue)


def test_the_model_is_adopted_unverified_and_never_downloaded(served, tmp_path):
    catalogue, root = served["catalogue"], tmp_path / "artefacts"
    with pytest.raises(ArtefactError, match="not downloaded by mlharness") as exc:
        get(catalogue.get("whisper-large-v3"), root)
    assert "whisper-model.uri" in exc.value.hint and "huggingface.co" in exc.value.hint
    model = tmp_path / "whisper-large-v3"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "whisper"}')
    out = get(catalogue.get("whisper-large-v3"), root, source=model)
    assert out.action == "adopted" and not out.verified
    assert status(catalogue.get("whisper-large-v3"), root).state == "unverified"
