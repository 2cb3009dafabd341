"""Whisper through ``--backend openai`` against a scripted /v1/audio/transcriptions server
(transcription_server.py, vLLM's streaming form): the clip's file is sent as it is on disk with
the reference's settings, the text answer becomes the label response, the server's
completion_tokens LoadGen's n_tokens, and accuracy.txt equals accuracy_eval.py on the log."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest
import referee
import whisper_fixtures as wf
from catalogue_support import run_cli
from extras import has_extra
from transcription_server import TranscriptionServer

from mlharness.speech import labels
from mlharness.speech.manifest import MANIFEST_NAME, read_manifest

pytestmark = pytest.mark.skipif(not has_extra("soundfile"), reason="soundfile missing")


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    data = wf.session_data(tmp_path_factory)["data"]
    clips = read_manifest(data / MANIFEST_NAME).clips
    # clip 2's answer misses its last word: WER above 0
    answers = {hashlib.sha256(c.audio.read_bytes()).hexdigest():
               (" " + (c.transcript.rsplit(" ", 1)[0] if k == 2 else c.transcript).upper(),
                10 + k) for k, c in enumerate(clips)}
    return {"data": data, "answers": answers, "clips": clips}


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
    details = record["accuracy"]["details"]
    assert details["errors"] == 1 and details["words"] > words
    # the screen shows the word error rate and what the target allows, not "ACCURACY"
    shown = f"WER {100 / details['words']:.3f}% (<= 3.046%)"
    assert record["accuracy"]["shown"] == shown and shown in result.out


def test_an_offline_run_shows_tokens_and_samples_per_second(case, tmp_path, capsys):
    with TranscriptionServer(case["answers"]) as server:
        result = _run(case, tmp_path, capsys, server.url, "-s", "Offline", "--target-qps",
                      "200", "--min-duration", "300")
    assert result.code == 0, (result.out[-1500:], result.err[-1500:])
    run_dir = next((tmp_path / "whisper").glob("Offline-performance-*"))
    res = json.loads((run_dir / "run.json").read_text())["result"]
    assert (res["metric"], res["unit"]) == ("result_tokens_per_second", "tokens/s")
    assert res["valid"] is True and res["value"] > res["samples_per_s"] > 0
    assert f"{res['samples_per_s']:,.2f} samples/s)" in result.out and "tok/s (" in result.out


def test_a_server_without_token_counts_fails_the_run(case, tmp_path, capsys):
    with TranscriptionServer(case["answers"], usage=False) as server:
        result = _run(case, tmp_path, capsys, server.url, "--mode", "accuracy")
    assert result.code == 3, (result.out[-1500:], result.err[-1500:])
    assert "completion_tokens" in result.err + result.out


CLIP = b"RIFF-not-really-a-clip"
ANSWERS = {hashlib.sha256(CLIP).hexdigest(): (" Hello there.", 5)}


def _transcribe(url: str, max_tokens: int = 200, **settings):
    from mlharness.backends.openai_stream import ClientSettings, OpenAIStreamClient

    client = OpenAIStreamClient(ClientSettings(base_url=url, model="openai/whisper-large-v3",
                                               **settings))
    firsts = []
    result = asyncio.run(client.transcribe(CLIP, max_tokens, lambda ids, at: firsts.append(ids),
                                           language="en"))
    return result, firsts


def test_the_client_streams_a_transcript_with_the_servers_count():
    with TranscriptionServer(ANSWERS) as server:
        result, firsts = _transcribe(server.url)
    assert (result.text, result.n_tokens, result.token_ids, firsts) == (" Hello there.", 5, [],
                                                                         [[]])
    assert server.forms[0]["max_completion_tokens"] == "200"


@pytest.mark.parametrize("case, settings, message", [
    ("no usage", {}, "streamed no usage.completion_tokens"),
    ("inflated", {}, "counted 500 completion_tokens for 4 pieces of text of a request of at "
                     "most 200"),
    ("stall", {"stall_timeout_s": 0.5}, "stalled: no progress for 0.5 s while waiting for the "
                                        "first token"),
    ("huge", {"max_event_bytes": 1 << 20}, "sent a line (an event) of more than 1 MiB"),
    ("endless", {}, "events without a token"),
])
def test_a_hostile_transcription_server_fails_the_request_in_one_line(case, settings, message):
    """The transcription client keeps the completion client's bounds and errors: one line
    naming the endpoint, the stall deadline, the event size, the endless stream, the count."""
    from mlharness.backends.openai_sse import EndpointError

    answers = {k: (text, 500 if case == "inflated" else n) for k, (text, n) in ANSWERS.items()}
    hostile = case if case in ("stall", "huge", "endless") else None
    with TranscriptionServer(answers, usage=case != "no usage", hostile=hostile) as server:
        with pytest.raises(EndpointError) as caught:
            _transcribe(server.url, **settings)
    text = caught.value.message
    assert f"{server.url}/v1/audio/transcriptions" in text and message in text
    assert "\n" not in text and caught.value.hint


def test_the_manifest_is_the_source_of_sample_order(case, tmp_path, capsys):
    """Sample k is the manifest's k-th kept clip, whatever order the manifest lists them in
    (the reference's repack writes its file system's directory order): with the manifest
    reversed, every logged qsl_idx carries the transcript of that manifest entry, and
    accuracy_eval.py reading the same manifest agrees."""
    entries = json.loads((case["data"] / MANIFEST_NAME).read_text())
    manifest = tmp_path / "reversed.json"
    manifest.write_text(json.dumps(entries[::-1]))
    with TranscriptionServer(case["answers"]) as server:
        _run(case, tmp_path, capsys, server.url, "--mode", "accuracy", "--task-option",
             f"manifest={manifest}")
    run_dir = next((tmp_path / "whisper").glob("Offline-accuracy-*"))
    clips = read_manifest(manifest, case["data"]).clips
    by_file = {c.audio.name: k for k, c in enumerate(case["clips"])}
    for entry in json.loads((run_dir / "mlperf_log_accuracy.json").read_text()):
        clip = clips[entry["qsl_idx"]]
        said = labels.decode_response(bytes.fromhex(entry["data"]))
        expected = case["clips"][by_file[clip.audio.name]].transcript
        if by_file[clip.audio.name] != 2:  # clip 2's answer misses its last word
            assert said == labels.decode(labels.transcript_indices(expected))
    line = referee.whisper("speech2text/accuracy_eval.py", "--log_dir", str(run_dir),
                           "--dataset_dir", str(case["data"]), "--manifest",
                           str(manifest)).stdout.strip().splitlines()[-1]
    assert (run_dir / "accuracy.txt").read_text().strip() == line
