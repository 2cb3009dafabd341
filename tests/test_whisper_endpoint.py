"""Whisper through ``--backend openai`` against a scripted /v1/audio/transcriptions server
(transcription_server.py, vLLM's streaming form): the clip's file is sent as it is on disk with
the reference's settings, the text answer becomes the label response, the server's
completion_tokens LoadGen's n_tokens, and accuracy.txt equals accuracy_eval.py on the log."""

from __future__ import annotations

import hashlib
import json

import pytest
import referee
import whisper_fixtures as wf
from catalogue_support import run_cli
from extras import has_extra
from transcription_server import TranscriptionServer

from mlharness.speech import repack
from mlharness.speech.manifest import MANIFEST_NAME, read_manifest

pytestmark = pytest.mark.skipif(not has_extra("soundfile"), reason="soundfile missing")


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("whisper_endpoint")
    repack.repack(wf.librispeech(tmp), tmp / "data")
    clips = read_manifest(tmp / "data" / MANIFEST_NAME).clips
    # clip 2's answer misses its last word: WER above 0
    answers = {hashlib.sha256(c.audio.read_bytes()).hexdigest():
               (" " + (c.transcript.rsplit(" ", 1)[0] if k == 2 else c.transcript).upper(),
                10 + k) for k, c in enumerate(clips)}
    return {"data": tmp / "data", "answers": answers, "clips": clips}


def _run(case, out, capsys, url: str, *args: str):
    return run_cli(["run", "-b", "whisper", "--backend", "openai", "--dataset", case["data"],
                    "--backend-option", f"endpoints={url}", "--backend-option",
                    "served_model=openai/whisper-large-v3", "--output-dir", out, *args], capsys)


def test_accuracy_through_a_transcription_server(case, tmp_path, capsys):
    with TranscriptionServer(case["answers"]) as server:
        result = _run(case, tmp_path, capsys, server.url, "--mode", "accuracy")
    assert result.code == 1, result.err[-2000:]  # 4 of the 1633 clips: not a passing result
    assert len(server.forms) == 4
    assert server.forms[0] == {"model": "openai/whisper-large-v3", "language": "en",
                               "response_format": "json", "temperature": "0",
                               "max_completion_tokens": "200", "stream": "true",
                               "stream_include_usage": "true"}
    run_dir = next((tmp_path / "whisper").glob("Offline-accuracy-*"))
    log = json.loads((run_dir / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["token_count"] for e in log) == [10, 11, 12, 13]
    line = referee.whisper("speech2text/accuracy_eval.py", "--log_dir", str(run_dir),
                           "--dataset_dir", str(case["data"]), "--manifest",
                           str(case["data"] / MANIFEST_NAME)).stdout.strip().splitlines()[-1]
    assert (run_dir / "accuracy.txt").read_text().strip() == line
    record = json.loads((run_dir / "run.json").read_text())
    words = len(case["clips"][2].transcript.split())
    assert record["accuracy"]["details"]["errors"] == 1
    assert record["accuracy"]["details"]["words"] > words


def test_a_server_without_token_counts_fails_the_run(case, tmp_path, capsys):
    with TranscriptionServer(case["answers"], usage=False) as server:
        result = _run(case, tmp_path, capsys, server.url, "--mode", "accuracy")
    assert result.code == 3, (result.out[-1500:], result.err[-1500:])
    assert "completion_tokens" in result.err + result.out
