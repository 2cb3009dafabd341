"""``mlharness get``: the catalogue's facts, and downloads, resume, verification, mirrors,
adoption and re-verification against a real local HTTP server with faults (no internet)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import zipfile
from pathlib import Path
from typing import Iterator

import pytest

from artefact_server import ArtefactServer
from mlharness.artefacts import (ArtefactError, ChecksumMismatch, DownloadFailed, Policy,
                                 check, get, load_catalogue, status)
from mlharness.cli.main import main
from mlharness.errors import ConfigError

MODEL = bytes(range(256)) * 800  # 200 KiB: several 64 KiB blocks, so "half" is mid-file
VOCAB = b"[PAD]\n[UNK]\nthe\n"
IMAGES = {f"ILSVRC2012_val_0000000{i}.JPEG": b"\xff\xd8jpeg" + bytes([i]) for i in range(1, 5)}
VAL_TXT = "".join(f"{name} {i * 7}\n" for i, name in enumerate(IMAGES))


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _zip(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _targz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _jpeg(width: int, height: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), (200, 10, 10)).save(buf, "JPEG")
    return buf.getvalue()


PICTURES = {"0a1b.jpg": (8, 6), "0c2d.jpg": (5, 7), "0e3f.jpg": (4, 4)}
COCO = {"images": [{"id": i, "file_name": name, "width": w, "height": h}
                   for i, (name, (w, h)) in enumerate(PICTURES.items())], "annotations": []}
ANNOTATIONS = _zip({"openimages-mlperf.json": json.dumps(COCO).encode()})
AUX = _targz({"val.txt": VAL_TXT.encode(), "synsets.txt": b"n01440764\n"})


def _catalogue(base: str) -> str:
    """A small catalogue in the shipped format whose files the local server serves."""
    return f"""
[artefacts.model]
kind = "model"
benchmarks = ["resnet50"]
framework = "onnx"
precision = "fp32"
summary = "a model"
path = "models/m/model.onnx"
urls = ["{base}/official/model.onnx", "{base}/second/model.onnx"]
md5 = ["{_md5(MODEL)}"]
checksum_source = "test fixture"
licence = "test"

[artefacts.vocab]
kind = "vocabulary"
benchmarks = ["bert-99"]
summary = "a vocab"
path = "datasets/squad/vocab.txt"
urls = ["{base}/official/vocab.txt"]
sha256 = ["{hashlib.sha256(VOCAB).hexdigest()}"]
checksum_source = "test fixture"
licence = "test"

[artefacts.annotations]
kind = "annotations"
benchmarks = ["retinanet"]
summary = "annotations"
path = "datasets/openimages/annotations.zip"
urls = ["{base}/official/annotations.zip"]
md5 = ["{_md5(ANNOTATIONS)}"]
checksum_source = "test fixture"
unpack = "zip"
unpacked = "datasets/openimages/annotations"
licence = "test"

[artefacts.openimages-mlperf]
kind = "dataset"
benchmarks = ["retinanet"]
access = "prepare"
summary = "openimages subset"
path = "datasets/openimages-mlperf"
aliases = ["openimages"]
layout = "openimages"
items = {len(PICTURES)}
requires = ["annotations"]
item_url = "{base}/images/{{file}}"
unverified = "per image: decodes with the annotated size"
checksum_source = "annotations"
obtain = "get it"
licence = "CC BY"

[artefacts.imagenet-aux]
kind = "auxiliary"
benchmarks = ["resnet50"]
summary = "caffe aux"
path = "datasets/imagenet-aux/caffe_ilsvrc12.tar.gz"
urls = ["{base}/official/caffe_ilsvrc12.tar.gz"]
md5 = ["{_md5(AUX)}"]
checksum_source = "test fixture"
unpack = "tar.gz"
unpacked = "datasets/imagenet-aux/caffe_ilsvrc12"
licence = "test"

[artefacts.imagenet-val]
kind = "dataset"
benchmarks = ["resnet50"]
access = "user"
summary = "imagenet"
path = "datasets/imagenet-val"
aliases = ["imagenet"]
layout = "imagenet"
items = {len(IMAGES)}
unverified = "layout checked"
checksum_source = "none"
obtain = "image-net.org, then --from"
licence = "research only"

[defaults.resnet50]
model = {{ onnx = "model" }}
dataset = "imagenet-val"

[artefacts.gated]
kind = "dataset"
benchmarks = ["llama2-70b"]
access = "gated"
summary = "gated"
path = "datasets/gated/data.json"
obtain = "the MLCommons R2 downloader"
unverified = "no digest published"
checksum_source = "README"
licence = "members only"
"""


def serving(srv: ArtefactServer) -> ArtefactServer:
    """``srv`` serving the catalogue's files (official and second URLs, images)."""
    for prefix in ("official", "second"):
        srv.files[f"{prefix}/model.onnx"] = MODEL
    srv.files["official/vocab.txt"] = VOCAB
    srv.files["official/annotations.zip"] = ANNOTATIONS
    srv.files["official/caffe_ilsvrc12.tar.gz"] = AUX
    for name, (w, h) in PICTURES.items():
        srv.files[f"images/{name}"] = _jpeg(w, h)
    return srv


def set_up(server: ArtefactServer, tmp_path: Path) -> tuple:
    """(the server, the catalogue it serves, the cache's artefacts root, the catalogue file)."""
    path = tmp_path / "catalogue.toml"
    path.write_text(_catalogue(server.base))
    return server, load_catalogue(path), tmp_path / "cache" / "artefacts", path


@pytest.fixture
def server() -> Iterator[ArtefactServer]:
    with ArtefactServer() as srv:
        yield serving(srv)


@pytest.fixture
def setup(server: ArtefactServer, tmp_path: Path) -> tuple:
    return set_up(server, tmp_path)


FAST = Policy(retries=3, backoff_s=0.001, timeout_s=5.0)


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*") if p.name.endswith((".part", ".tmp")))


# ------------------------------------------------------------------ the shipped catalogue


def test_every_catalogue_entry_has_a_checksum_or_a_reason_and_a_source() -> None:
    catalogue = load_catalogue()
    assert {"resnet50-onnx", "retinanet-onnx", "bert-onnx", "bert-vocab", "squad-dev",
            "imagenet-val", "openimages-annotations"} <= set(catalogue.artefacts)
    paths = [a.path for a in catalogue.artefacts.values()]
    assert len(paths) == len(set(paths))
    for a in catalogue.artefacts.values():
        assert a.verified or a.unverified, a.name
        assert a.checksum_source.strip() and a.licence.strip(), a.name
        if a.verified:  # a digest names the file it was copied from (pinned in the header)
            assert any(s in a.checksum_source for s in ("AUTOMATIONS", "INFERENCE")), a.name
        if a.access == "download":
            assert a.urls and all(u.startswith(("https://", "http://")) for u in a.urls), a.name
        if a.access in ("user", "gated"):
            assert a.obtain, a.name
    assert catalogue.get("imagenet-val").access == "user"  # licence: never downloaded
    assert all(a.access == "gated" for a in catalogue.for_benchmark("llama2-70b"))


def test_shipped_calibration_lists_have_the_publishers_md5(tmp_path: Path) -> None:
    """The lists in rules/calibration are the files MLCommons' automation checksums."""
    catalogue = load_catalogue()
    bundled = [n for n, a in catalogue.artefacts.items() if a.access == "bundled"]
    results = check(catalogue, tmp_path, bundled)
    assert [r.state for r in results] == ["bundled"] * len(bundled)


def test_a_bad_catalogue_entry_is_named(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[artefacts.x]\nkind = "model"\nbenchmarks = []\nsummary = ""\n'
                    'path = "m.onnx"\nurls = ["http://h/m"]\nchecksum_source = "?"\n'
                    'licence = "?"\n')
    with pytest.raises(ConfigError, match="artefact 'x'.*md5 or sha256"):
        load_catalogue(path)
    with pytest.raises(ConfigError, match="did you mean model"):
        _get_unknown()


def _get_unknown() -> None:
    from mlharness.artefacts.catalogue import Artefact, Catalogue

    entry = Artefact(name="model", kind="model", benchmarks=[], summary="", path="m",
                     urls=["http://h/m"], md5=["0" * 32], checksum_source="s", licence="l")
    Catalogue(artefacts={"model": entry}).get("modle")


# ------------------------------------------------------------------ downloads


def test_download_verifies_and_a_second_get_downloads_nothing(setup: tuple) -> None:
    server, catalogue, root, _ = setup
    events: list = []
    first = get(catalogue.get("model"), root, policy=FAST, report=events.append)
    assert first.action == "downloaded" and first.digest == _md5(MODEL)
    assert first.path.read_bytes() == MODEL
    assert {e.event for e in events} >= {"start", "bytes", "verify", "done"}
    second = get(catalogue.get("model"), root, policy=FAST)
    assert second.action == "cached"
    assert server.asked("official/model.onnx") == [None]  # one request in all
    vocab = get(catalogue.get("vocab"), root, policy=FAST)  # sha256 entries too
    assert vocab.path.read_bytes() == VOCAB and _leftovers(root) == []


def test_a_dropped_connection_resumes_with_range(setup: tuple) -> None:
    server, catalogue, root, _ = setup
    server.fault("official/model.onnx", "drop")
    events: list = []
    out = get(catalogue.get("model"), root, policy=FAST, report=events.append)
    assert out.path.read_bytes() == MODEL
    ranges = server.asked("official/model.onnx")
    assert ranges == [None, f"bytes={len(MODEL) // 2}-"]
    assert any(e.event == "retry" and "closed at byte" in e.message for e in events)
    assert _leftovers(root) == []


def test_an_interrupted_get_leaves_a_part_file_that_the_next_get_resumes(setup: tuple) -> None:
    server, catalogue, root, _ = setup
    server.fault("official/model.onnx", "drop")
    server.fault("second/model.onnx", "drop")
    with pytest.raises(DownloadFailed,
                       match="model: could not download models/m/model.onnx") as exc:
        get(catalogue.get("model"), root, policy=Policy(retries=0, backoff_s=0))
    assert exc.value.exit_code == 3 and "resumes" in exc.value.hint
    dest = root / "models/m/model.onnx"
    assert not dest.exists()  # never a half file where the good one is expected
    half = len(MODEL) // 2  # the second URL went on from the first's half, and dropped too
    assert server.asked("second/model.onnx") == [f"bytes={half}-"]
    have = half + (len(MODEL) - half) // 2
    assert (root / "models/m/model.onnx.part").stat().st_size == have
    assert status(catalogue.get("model"), root).state == "partial"
    out = get(catalogue.get("model"), root, policy=FAST)
    assert out.action == "downloaded" and dest.read_bytes() == MODEL
    assert server.asked("official/model.onnx")[-1] == f"bytes={have}-"


def test_a_redirected_resume_keeps_its_range(setup: tuple) -> None:
    """Zenodo answers a file URL with a redirect: the resumed request still asks for the rest."""
    server, catalogue, root, _ = setup
    server.files["files/model.onnx?download=1"] = server.files.pop("official/model.onnx")
    server.redirects["official/model.onnx"] = "files/model.onnx?download=1"
    server.fault("files/model.onnx?download=1", "drop")
    out = get(catalogue.get("model"), root, policy=FAST)
    assert out.path.read_bytes() == MODEL
    assert server.asked("files/model.onnx?download=1") == [None, f"bytes={len(MODEL) // 2}-"]


def test_wrong_bytes_are_refused_and_fetched_again(setup: tuple) -> None:
    server, catalogue, root, _ = setup
    server.fault("official/model.onnx", "corrupt")
    events: list = []
    out = get(catalogue.get("model"), root, policy=FAST, report=events.append)
    assert out.path.read_bytes() == MODEL
    refused = [e.message for e in events if e.event == "retry"]
    assert refused and refused[0].startswith(server.url("official/model.onnx") + ": the ")
    assert "bytes it served for models/m/model.onnx were refused: md5" in refused[0]
    assert server.asked("official/model.onnx") == [None, None]  # fetched again from the start


def test_wrong_bytes_everywhere_fail_naming_the_file_and_the_digests(setup: tuple) -> None:
    server, catalogue, root, _ = setup
    server.fault("official/model.onnx", *["corrupt"] * 3)
    server.fault("second/model.onnx", *["corrupt"] * 3)
    with pytest.raises(DownloadFailed) as exc:
        get(catalogue.get("model"), root, policy=Policy(retries=1, backoff_s=0))
    text = exc.value.message
    assert "models/m/model.onnx" in text and f"published {_md5(MODEL)}" in text
    assert "source: test fixture" in text
    assert not (root / "models/m/model.onnx").exists() and _leftovers(root) == []


def test_404_moves_on_to_the_next_url_without_retrying(setup: tuple) -> None:
    server, catalogue, root, _ = setup
    server.files.pop("official/model.onnx")
    out = get(catalogue.get("model"), root, policy=FAST)
    assert out.path.read_bytes() == MODEL
    assert server.asked("official/model.onnx") == [None]
    server.files.pop("official/vocab.txt")
    with pytest.raises(DownloadFailed, match="HTTP 404"):
        get(catalogue.get("vocab"), root, policy=FAST)
    assert len(server.asked("official/vocab.txt")) == 1


def test_an_unknown_host_is_not_retried(setup: tuple) -> None:
    server, catalogue, root, path = setup
    text = path.read_text().replace(f"{server.base}/official/model.onnx",
                                    "http://no-such-host.invalid/model.onnx")
    path.write_text(text)
    waits: list[float] = []
    out = get(load_catalogue(path).get("model"), root, policy=Policy(sleep=waits.append))
    assert out.path.read_bytes() == MODEL and waits == []  # straight on to the second URL


def test_500_is_retried_with_back_off(setup: tuple) -> None:
    server, catalogue, root, _ = setup
    server.fault("official/model.onnx", "500", "500")
    waits: list[float] = []
    policy = Policy(retries=3, backoff_s=0.5, sleep=waits.append)
    out = get(catalogue.get("model"), root, policy=policy)
    assert out.path.read_bytes() == MODEL
    assert waits == [0.5, 1.0]  # doubling back-off, slept through the policy's clock


def test_a_slow_trickle_completes_with_progress(setup: tuple) -> None:
    server, catalogue, root, _ = setup
    server.fault("official/model.onnx", "trickle")
    events: list = []
    out = get(catalogue.get("model"), root, policy=FAST, report=events.append)
    assert out.path.read_bytes() == MODEL
    sizes = [e.done for e in events if e.event == "bytes"]  # as the bytes arrive (a loaded
    assert len(sizes) >= 2 and sizes == sorted(sizes) and sizes[-1] == len(MODEL)  # box joins some)
    assert all(e.total == len(MODEL) for e in events if e.event == "bytes")


def test_a_stalled_server_times_out_and_resumes(setup: tuple) -> None:
    server, catalogue, root, _ = setup
    server.stall_s = 1.5
    server.fault("official/model.onnx", "stall")
    events: list = []
    out = get(catalogue.get("model"), root, report=events.append,
              policy=Policy(retries=2, backoff_s=0, timeout_s=0.3))
    assert out.path.read_bytes() == MODEL
    retries = [e.message for e in events if e.event == "retry"]
    # the client's timeout ends the attempt (or, on a starved machine, the server's close does)
    assert retries and ("no data for 0.3s" in retries[0] or "closed at byte" in retries[0])
    assert server.asked("official/model.onnx")[1] == f"bytes={len(MODEL) // 3}-"


def test_a_server_without_range_support_is_downloaded_from_the_start(setup: tuple) -> None:
    server, catalogue, root, _ = setup
    server.ranges = False
    server.fault("official/model.onnx", "drop")
    out = get(catalogue.get("model"), root, policy=FAST)
    assert out.path.read_bytes() == MODEL  # the 200 answer rewrote the part file
    assert server.asked("official/model.onnx") == [None, f"bytes={len(MODEL) // 2}-"]


def test_a_mirror_serves_everything_under_the_cache_paths(setup: tuple) -> None:
    server, catalogue, root, _ = setup
    for name in ("model", "vocab", "annotations", "imagenet-aux"):
        entry = catalogue.get(name)
        server.files[f"mirror/{entry.path}"] = server.files.pop(
            "official/" + entry.urls[0].rsplit("/", 1)[1])
    server.files.pop("second/model.onnx")
    for name in ("model", "vocab", "annotations", "imagenet-aux"):
        out = get(catalogue.get(name), root, mirror=server.url("mirror/"), policy=FAST)
        assert out.action == "downloaded" and out.verified
    assert {p.split("/")[0] for p, _ in server.requests} == {"mirror"}
    assert json.loads((root / "datasets/openimages/annotations/openimages-mlperf.json")
                      .read_text()) == COCO
    assert (root / "datasets/imagenet-aux/caffe_ilsvrc12/val.txt").read_text() == VAL_TXT


def test_two_gets_at_once_download_once(setup: tuple) -> None:
    server, catalogue, root, _ = setup
    server.fault("official/model.onnx", "trickle")
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        outs = list(pool.map(lambda _: get(catalogue.get("model"), root, policy=FAST), range(2)))
    assert sorted(o.action for o in outs) == ["cached", "downloaded"]
    assert server.asked("official/model.onnx") == [None]


def test_a_cached_file_changed_on_disk_is_refused_and_fetched_again(setup: tuple) -> None:
    server, catalogue, root, _ = setup
    dest = get(catalogue.get("model"), root, policy=FAST).path
    dest.write_bytes(b"x" + MODEL[1:])  # size kept, mtime moves: the stamp no longer holds
    out = get(catalogue.get("model"), root, policy=FAST)
    assert out.action == "downloaded" and dest.read_bytes() == MODEL
    assert (dest.parent / "model.onnx.bad").read_bytes()[:1] == b"x"


def test_check_rehashes_and_moves_a_damaged_file_aside(setup: tuple) -> None:
    server, catalogue, root, _ = setup
    dest = get(catalogue.get("model"), root, policy=FAST).path
    get(catalogue.get("annotations"), root, policy=FAST)
    assert {r.name: r.state for r in check(catalogue, root, ["model", "annotations"])} == {
        "model": "ok", "annotations": "ok"}
    st = dest.stat()
    dest.write_bytes(b"x" + MODEL[1:])
    os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))  # bit rot: size and mtime unchanged
    assert status(catalogue.get("model"), root).state == "cached"  # the stamp cannot tell
    [bad] = check(catalogue, root, ["model"])
    assert bad.state == "bad" and "is not the published" in bad.detail
    assert status(catalogue.get("model"), root).state == "missing"
    assert get(catalogue.get("model"), root, policy=FAST).action == "downloaded"


def test_openimages_subset_is_built_from_its_annotations_image_by_image(setup: tuple) -> None:
    server, catalogue, root, _ = setup
    server.fault("images/0a1b.jpg", "corrupt")  # not a JPEG any more: refused, fetched again
    server.files["images/0c2d.jpg"] = _jpeg(5, 5)  # not the annotated size: refused
    events: list = []
    with pytest.raises(DownloadFailed, match=r"1 of 3 images could not be downloaded; first: "
                       r".*0c2d.jpg: image is 5x5, its annotation says 5x7") as exc:
        get(catalogue.get("openimages-mlperf"), root, policy=FAST, report=events.append,
            catalogue=catalogue)
    assert "2 images already there are kept" in exc.value.hint
    assert server.asked("images/0a1b.jpg") == [None, None]
    server.files["images/0c2d.jpg"] = _jpeg(5, 7)
    out = get(catalogue.get("openimages-mlperf"), root, policy=FAST, catalogue=catalogue)
    assert out.action == "prepared"
    assert server.asked("images/0e3f.jpg") == [None]  # kept, not fetched again
    assert server.asked("official/annotations.zip") == [None]
    data = out.path / "validation/data"
    assert sorted(p.name for p in data.iterdir()) == sorted(PICTURES)
    assert json.loads((out.path / "annotations/openimages-mlperf.json").read_text()) == COCO
    assert status(catalogue.get("openimages"), root).state == "checked"
    assert [r.state for r in check(catalogue, root, ["openimages-mlperf"])] == ["ok"]
    again = get(catalogue.get("openimages-mlperf"), root, policy=FAST, catalogue=catalogue)
    assert again.action == "cached" and len(server.requests) == 9
    assert {e.event for e in events} >= {"items"} and _leftovers(root) == []


# ------------------------------------------------------------------ adoption (--from)


def test_from_adopts_a_good_file_by_link_and_refuses_a_wrong_one(setup: tuple,
                                                                 tmp_path: Path) -> None:
    server, catalogue, root, _ = setup
    mine = tmp_path / "downloads" / "model.onnx"
    mine.parent.mkdir()
    mine.write_bytes(MODEL)
    out = get(catalogue.get("model"), root, source=mine.parent)  # a folder holding it works
    assert out.action == "adopted" and out.verified
    assert out.path.stat().st_ino == mine.stat().st_ino and mine.exists()  # linked, not moved
    assert server.requests == []
    wrong = tmp_path / "other.onnx"
    wrong.write_bytes(MODEL[:-1])
    with pytest.raises(ChecksumMismatch, match=r"--from .*other.onnx is not model: md5"):
        get(catalogue.get("model"), root / "fresh", source=wrong)
    assert not (root / "fresh" / "models/m/model.onnx").exists()


def test_from_another_file_system_copies_and_verifies(setup: tuple, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    server, catalogue, root, _ = setup
    mine = tmp_path / "model.onnx"
    mine.write_bytes(MODEL)

    def no_link(*args: object) -> None:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    out = get(catalogue.get("model"), root, source=mine)
    assert out.path.read_bytes() == MODEL and out.path.stat().st_ino != mine.stat().st_ino
    assert mine.exists() and _leftovers(root) == []


def test_imagenet_folder_is_checked_against_val_map_and_linked(setup: tuple,
                                                               tmp_path: Path) -> None:
    server, catalogue, root, _ = setup
    val = tmp_path / "ILSVRC2012_val"
    val.mkdir()
    for name, data in IMAGES.items():
        (val / name).write_bytes(data)
    (val / "val_map.txt").write_text(VAL_TXT)
    out = get(catalogue.get("imagenet-val"), root, source=val, catalogue=catalogue)
    assert out.path.resolve() == val.resolve() and not out.verified
    assert [r.state for r in check(catalogue, root, ["imagenet-val"])] == ["ok"]
    (val / "ILSVRC2012_val_00000003.JPEG").unlink()
    with pytest.raises(ArtefactError, match="ILSVRC2012_val_00000003.JPEG .*is missing"):
        get(catalogue.get("imagenet-val"), root / "other", source=val, catalogue=catalogue)
    (val / "val_map.txt").write_text(VAL_TXT.replace(" 14\n", " 1000\n"))
    with pytest.raises(ArtefactError, match="not '<file> <label 0..999>'"):
        get(catalogue.get("imagenet-val"), root / "other", source=val, catalogue=catalogue)


def test_imagenet_without_val_map_takes_caffes_val_txt(setup: tuple, tmp_path: Path) -> None:
    server, catalogue, root, _ = setup
    val = tmp_path / "ILSVRC2012_val"
    val.mkdir()
    for name, data in IMAGES.items():
        (val / name).write_bytes(data)
    server.files.pop("official/caffe_ilsvrc12.tar.gz")
    with pytest.raises(DownloadFailed, match="imagenet-aux: could not download"):
        get(catalogue.get("imagenet-val"), root, source=val, catalogue=catalogue, policy=FAST)
    server.files["official/caffe_ilsvrc12.tar.gz"] = AUX  # the labels come with imagenet-aux
    out = get(catalogue.get("imagenet-val"), root, source=val, catalogue=catalogue, policy=FAST)
    assert server.asked("official/caffe_ilsvrc12.tar.gz") == [None, None]
    assert (out.path / "val_map.txt").read_text() == VAL_TXT
    assert sorted(p.name for p in val.iterdir()) == sorted(IMAGES)  # the user's folder untouched
    assert (out.path / "ILSVRC2012_val_00000001.JPEG").read_bytes() == IMAGES[
        "ILSVRC2012_val_00000001.JPEG"]


def test_imagenet_from_the_users_tar_archive(setup: tuple, tmp_path: Path) -> None:
    server, catalogue, root, _ = setup
    archive = tmp_path / "ILSVRC2012_img_val.tar"
    with tarfile.open(archive, "w") as tf:
        for name, data in IMAGES.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    get(catalogue.get("imagenet-aux"), root, policy=FAST)
    out = get(catalogue.get("imagenet-val"), root, source=archive, catalogue=catalogue)
    assert out.action == "adopted" and archive.is_file()  # unpacked into the cache, not moved
    assert (out.path / "val_map.txt").read_text() == VAL_TXT
    assert sorted(p.name for p in out.path.iterdir()) == sorted([*IMAGES, "val_map.txt"])
    assert status(catalogue.get("imagenet"), root).state == "checked"


def test_gated_artefacts_are_never_downloaded_and_adopted_unverified(setup: tuple,
                                                                    tmp_path: Path) -> None:
    server, catalogue, root, _ = setup
    with pytest.raises(ArtefactError, match="not downloaded by mlharness") as exc:
        get(catalogue.get("gated"), root)
    assert "R2 downloader" in exc.value.hint and server.requests == []
    data = tmp_path / "data.json"
    data.write_text("[]")
    out = get(catalogue.get("gated"), root, source=data)
    assert not out.verified and out.digest == hashlib.sha256(b"[]").hexdigest()
    assert status(catalogue.get("gated"), root).state == "unverified"


# ------------------------------------------------------------------ the command


def test_cli_get_list_and_check(setup: tuple, capsys: pytest.CaptureFixture[str]) -> None:
    server, catalogue, root, path = setup
    common = ["--catalogue", str(path), "--cache-dir", str(root.parent)]
    assert main(["get", "model", "vocab", *common]) == 0
    err = capsys.readouterr().err
    assert "model: downloaded, verified" in err and "vocab: downloaded, verified" in err
    assert main(["get", "model", *common]) == 0
    assert "already cached, nothing downloaded" in capsys.readouterr().err
    assert main(["get", "--list", "--json", *common]) == 0
    states = {r["name"]: r["state"] for r in json.loads(capsys.readouterr().out)}
    assert states["model"] == "cached" and states["imagenet-val"] == "missing"
    assert main(["get", "--check", *common]) == 0
    out = capsys.readouterr().out
    assert "2 checked, 0 bad" in out
    (root / "datasets/squad/vocab.txt").write_bytes(b"changed")
    assert main(["get", "--check", "--json", *common]) == 1
    server.files.pop("official/vocab.txt")
    assert main(["get", "vocab", "--retries", "0", *common]) == 3
    assert "vocab: could not download datasets/squad/vocab.txt: " in capsys.readouterr().err
    assert main(["get", "nosuch", *common]) == 2
    capsys.readouterr()
    assert main(["get", "-b", "resnet50", *common]) == 2  # the model is there; ImageNet: --from
    err = capsys.readouterr().err
    assert "model: already cached" in err and "imagenet-val is not downloaded" in err


def test_docs_list_every_artefact_with_its_checksum() -> None:
    """docs/get.md's table is the catalogue: every name and every published digest."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "get.md").read_text()
    for a in load_catalogue().artefacts.values():
        assert f"| `{a.name}`" in text, a.name
        for digest in [*a.md5, *a.sha256]:
            assert digest in text, (a.name, digest)
