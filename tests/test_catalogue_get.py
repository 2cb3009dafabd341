"""Catalogue: `mlharness get` against a mirror that redirects, a cache whose part file is a link,
a full disk, a part file already whole, a malformed mirror URL, a `--from` path that is not
there and a server that drips (issue 44). Each asserts the exit code or the outcome, the line,
what was asked of the servers and what the cache holds afterwards."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Iterator

import pytest
from artefact_server import ArtefactServer
from catalogue_support import assert_clean_error, run_cli
from test_get import FAST, MODEL, _leftovers, _md5, serving, set_up

from mlharness.artefacts import Policy, get
from mlharness.artefacts import download as download_module
from mlharness.artefacts.errors import ArtefactError, DownloadFailed


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple]:
    """test_get's server and catalogue: (server, catalogue, cache root, catalogue file)."""
    with ArtefactServer() as srv:
        yield set_up(serving(srv), tmp_path)


def _cli(setup: tuple, capsys, *argv: str):
    _, _, root, catalogue_file = setup
    return run_cli(["get", *argv, "--catalogue", str(catalogue_file), "--cache-dir",
                    str(root.parent.parent / "cache-root"), "--retries", "1"], capsys)


def _mirrored(server: ArtefactServer, catalogue) -> str:
    entry = catalogue.get("model")
    server.files[f"mirror/{entry.path}"] = MODEL
    return server.url("mirror")


def test_a_mirror_redirecting_to_another_server_is_refused(setup: tuple) -> None:
    server, catalogue, root, _ = setup
    mirror = _mirrored(server, catalogue)
    with ArtefactServer() as elsewhere:
        elsewhere.files["x/model.onnx"] = MODEL
        server.redirects[f"mirror/{catalogue.get('model').path}"] = elsewhere.url("x/model.onnx")
        with pytest.raises(ArtefactError) as err:
            get(catalogue.get("model"), root, mirror=mirror, policy=FAST)
        assert elsewhere.requests == []  # never asked
    assert err.value.exit_code == 2
    assert f"redirects {mirror}/models/m/model.onnx to {elsewhere.url('x/model.onnx')}" in \
        err.value.message and "nowhere else" in err.value.message
    assert not (root / "models/m/model.onnx").exists() and _leftovers(root) == []


def test_a_redirect_within_the_mirror_is_followed_and_recorded(setup: tuple) -> None:
    server, catalogue, root, _ = setup
    mirror = _mirrored(server, catalogue)
    path = f"mirror/{catalogue.get('model').path}"
    server.files["mirror/moved.onnx"] = server.files.pop(path)
    server.redirects[path] = "mirror/moved.onnx"
    out = get(catalogue.get("model"), root, mirror=mirror, policy=FAST)
    stamp = json.loads((out.path.parent / ".model.onnx.verified.json").read_text())
    assert stamp["source"] == (f"{mirror}/models/m/model.onnx (redirected to "
                               f"{server.url('mirror/moved.onnx')})")


def test_an_official_redirect_is_followed_and_the_stamp_says_where_from(setup: tuple) -> None:
    server, catalogue, root, _ = setup
    with ArtefactServer() as cdn:
        cdn.files["blob"] = MODEL
        server.redirects["official/model.onnx"] = cdn.url("blob")
        out = get(catalogue.get("model"), root, policy=FAST)
    stamp = json.loads((out.path.parent / ".model.onnx.verified.json").read_text())
    assert stamp["source"] == f"{server.url('official/model.onnx')} (redirected to " \
                              f"{cdn.url('blob')})"


def test_a_part_file_that_is_a_link_is_replaced_never_written_through(setup: tuple,
                                                                     tmp_path: Path) -> None:
    server, catalogue, root, _ = setup
    victim = tmp_path / "someone-elses-file"
    victim.write_bytes(b"19 bytes, untouched")
    part = root / "models/m/model.onnx.part"
    part.parent.mkdir(parents=True)
    part.symlink_to(victim)
    out = get(catalogue.get("model"), root, policy=FAST)
    assert out.path.read_bytes() == MODEL and not out.path.is_symlink()
    assert victim.read_bytes() == b"19 bytes, untouched"
    assert server.asked("official/model.onnx") == [None]  # from the start, not byte 19


def test_a_full_disk_ends_the_get_at_once_naming_the_disk_and_the_file(
        setup: tuple, capsys, monkeypatch) -> None:
    server, catalogue, root, _ = setup
    real = download_module._open_part

    class FullDisk:
        def __init__(self, fh) -> None:
            self.fh, self.written = fh, 0

        def write(self, block: bytes) -> int:
            if self.written + len(block) > 100_000:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.written += len(block)
            return self.fh.write(block)

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self.fh.close()

    monkeypatch.setattr(download_module, "_open_part",
                        lambda part, append: FullDisk(real(part, append)))
    result = _cli(setup, capsys, "model")
    cache = root.parent.parent / "cache-root" / "artefacts"
    assert_clean_error(result, 2, "model: No space left on device in "
                                  f"{cache / 'models/m'} writing model.onnx.part at byte")
    assert "the partial file is removed" in result.err and "--cache-dir" in result.err
    assert server.asked("official/model.onnx") == [None]  # no retry: the disk is the problem
    assert _leftovers(cache) == []


def test_a_refused_download_names_the_file_and_the_url(setup: tuple, capsys) -> None:
    server, _, _, _ = setup
    server.fault("official/model.onnx", *["corrupt"] * 4)
    server.fault("second/model.onnx", *["corrupt"] * 4)
    result = _cli(setup, capsys, "model")
    assert result.code == 3 and "Traceback" not in result.err
    text = " ".join(result.err.split())
    assert f"{server.url('official/model.onnx')}: the 204,800 bytes it served for " \
           "models/m/model.onnx were refused: md5" in text


@pytest.mark.parametrize("size_known", [False, True])
def test_a_whole_part_file_is_verified_not_downloaded_again(setup: tuple,
                                                            size_known: bool) -> None:
    """A get stopped while hashing leaves the whole file as its part: the next get verifies it
    (with the size in the catalogue, before asking anything; without, after the server's 416
    says it is whole) instead of throwing it away and downloading 1.3 GB again."""
    server, catalogue, root, _ = setup
    entry = catalogue.get("model")
    if size_known:
        entry = entry.model_copy(update={"size": len(MODEL)})
    part = root / "models/m/model.onnx.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(MODEL)
    out = get(entry, root, policy=FAST)
    assert out.action == "downloaded" and out.path.read_bytes() == MODEL
    assert server.asked("official/model.onnx") == ([] if size_known
                                                    else [f"bytes={len(MODEL)}-"])
    stamp = json.loads((out.path.parent / ".model.onnx.verified.json").read_text())
    assert stamp["source"].endswith("(resumed: the part file was complete)")


@pytest.mark.parametrize("mirror", ["mirror.internal/mlperf", "ftp://mirror/x",
                                    "http://mirror:99999/x", "http://[::1/x"])
def test_a_mirror_that_is_no_http_url_is_refused_before_anything_is_fetched(
        setup: tuple, capsys, mirror: str) -> None:
    server, _, _, _ = setup
    result = _cli(setup, capsys, "model", "--mirror", mirror)
    assert_clean_error(result, 2, f"--mirror {mirror!r} is not")
    assert server.requests == []


def test_from_a_path_that_is_not_there_is_refused_before_the_network(setup: tuple,
                                                                    capsys) -> None:
    server, _, _, _ = setup
    result = _cli(setup, capsys, "imagenet-val", "--from", "/nonexistent/path")
    assert_clean_error(result, 2, "--from /nonexistent/path: no such file or folder")
    assert server.requests == []  # imagenet-aux was not fetched for it


def test_a_drip_is_retried_as_a_stall_and_ends(setup: tuple) -> None:
    """A byte every 50 ms, each read well within the 0.3 s timeout: slower than the minimum rate
    over the window, each attempt ends, a retry line says so, and the get fails (exit 3)."""
    server, catalogue, root, _ = setup
    server.fault("official/model.onnx", "drip", "drip")
    server.fault("second/model.onnx", "drip", "drip")
    events: list = []
    policy = Policy(retries=1, backoff_s=0.001, timeout_s=0.3, rate_window_s=0.5)
    with pytest.raises(DownloadFailed) as err:
        get(catalogue.get("model"), root, policy=policy, report=events.append)
    assert "slower than 1,024 bytes/s for" in err.value.message
    retries = [e.message for e in events if e.event == "retry"]
    assert retries and all("slower than" in m for m in retries), retries
    assert _md5(MODEL) not in err.value.message  # no digest was compared: never finished
