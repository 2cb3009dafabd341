"""``run`` knows the cache: `mlharness get` then `mlharness run -b resnet50` with no paths
uses the cached official artefacts and records them; a missing one stops before the run."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from artefact_server import ArtefactServer
from mlharness.cli.main import main
from synthetic_vision import make_imagenet, resnet50_onnx


def _catalogue(base: str, md5: str, images: int) -> str:
    return f"""
[artefacts.resnet50-onnx]
kind = "model"
benchmarks = ["resnet50"]
framework = "onnx"
precision = "fp32"
summary = "model"
path = "models/resnet50/opset11/resnet50_v1.onnx"
urls = ["{base}/zenodo/resnet50_v1.onnx"]
md5 = ["{md5}"]
checksum_source = "test fixture"
licence = "test"

[artefacts.imagenet-val]
kind = "dataset"
benchmarks = ["resnet50"]
access = "user"
aliases = ["imagenet"]
summary = "imagenet"
path = "datasets/imagenet-val"
layout = "imagenet"
items = {images}
unverified = "layout checked"
checksum_source = "none"
obtain = "image-net.org"
licence = "research only"

[defaults.resnet50]
model = {{ onnx = "resnet50-onnx" }}
dataset = "imagenet-val"
"""


def test_get_then_run_uses_and_records_the_cached_artefacts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    model = resnet50_onnx(tmp_path / "src" / "resnet50_v1.onnx")
    data = model.read_bytes()
    val = tmp_path / "ILSVRC2012_val"
    make_imagenet(val, count=8)
    cache = tmp_path / "cache"
    monkeypatch.setenv("MLHARNESS_CACHE", str(cache))
    runs = ["--output-dir", str(tmp_path / "runs"), "--no-progress"]
    with ArtefactServer() as server:
        server.files["zenodo/resnet50_v1.onnx"] = data
        catalogue = tmp_path / "catalogue.toml"
        catalogue.write_text(_catalogue(server.base, hashlib.md5(data).hexdigest(), 8))
        monkeypatch.setenv("MLHARNESS_CATALOGUE", str(catalogue))

        # nothing cached: refused before anything runs, with the exact command
        assert main(["run", "-b", "resnet50", "--mode", "accuracy", *runs]) == 2
        err = capsys.readouterr().err
        assert "resnet50 needs resnet50-onnx, imagenet-val, not in the cache" in err
        assert "mlharness get resnet50-onnx; then mlharness get imagenet-val --from PATH" in err
        assert not (tmp_path / "runs").exists() and server.requests == []

        assert main(["get", "resnet50-onnx", "imagenet", "--from", str(val)]) == 0
        assert main(["get", "resnet50-onnx", "imagenet"]) == 0  # the second get: nothing fetched
        assert len(server.requests) == 1
    capsys.readouterr()
    code = main(["run", "-b", "resnet50", "-d", "imagenet", "--mode", "accuracy", "--json", *runs])
    out, err = capsys.readouterr()
    assert code in (0, 1), err  # random weights: the accuracy target is missed, the run is fine
    assert "model: resnet50-onnx from the cache (md5 " in err
    assert "dataset: imagenet-val from the cache (layout checked)" in err
    record = json.loads(out)
    assert record["status"] == "ok" and record["accuracy"]["details"] is not None
    used = {a["role"]: a for a in record["artefacts"]}
    assert used["model"]["name"] == "resnet50-onnx"
    assert used["model"]["checksum"] == "md5:" + hashlib.md5(data).hexdigest()
    assert used["dataset"]["name"] == "imagenet-val"
    saved = json.loads((Path(record["run_dir"]) / "run.json").read_text())
    assert saved["artefacts"] == record["artefacts"]


def test_what_run_takes_from_the_cache_and_when_it_refuses(tmp_path: Path) -> None:
    """The shipped catalogue's defaults, against an empty cache and a partly filled one."""
    from mlharness.artefacts import ArtefactError
    from mlharness.artefacts.for_run import fill_from_cache
    from mlharness.backends import model_framework_of

    def fill(data: dict) -> tuple[dict, list[str]]:  # as `run` does
        return fill_from_cache(data, model_framework_of(data.get("backend", "onnxruntime")))

    cache = tmp_path / "cache"
    bert = {"benchmark": "bert-99", "backend": "pytorch", "cache_dir": cache}
    with pytest.raises(ArtefactError, match="bert-99 needs bert-pytorch, bert-config, "
                       "squad-dev, bert-vocab, not in the cache") as exc:
        fill(bert)
    assert exc.value.hint == "mlharness get bert-pytorch bert-config squad-dev bert-vocab"
    with pytest.raises(ArtefactError) as exc:
        fill({"benchmark": "retinanet", "cache_dir": cache, "model": "retinanet-onnx"})
    assert exc.value.hint == "mlharness get retinanet-onnx openimages-mlperf"
    # a file of the command's own: nothing refused, nothing filled from an empty cache
    squad = tmp_path / "dev.json"
    squad.write_text("{}")
    assert fill({**bert, "dataset": squad}) == ({**bert, "dataset": squad}, [])
    # backends without a model format of the catalogue, and the demo: untouched
    for data in ({"benchmark": "resnet50", "backend": "noop", "cache_dir": cache},
                 {"benchmark": "demo", "cache_dir": cache}):
        assert fill(data) == (data, [])
    # a cached vocabulary fills in beside the command's own files
    vocab = cache / "artefacts/datasets/squad/vocab.txt"
    vocab.parent.mkdir(parents=True)
    vocab.write_text("[PAD]\n")
    from mlharness.artefacts import load_catalogue
    from mlharness.artefacts.cache import write_stamp

    write_stamp(vocab, load_catalogue().get("bert-vocab"), "0" * 32, source="test")
    data, notes = fill({**bert, "dataset": squad})
    assert data["vocab"] == vocab and notes == [
        f"vocab: bert-vocab from the cache (md5 {'0' * 32}) {vocab}"]
