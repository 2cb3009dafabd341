"""Whisper's data path against the official speech2text/ scripts, run unmodified in whisper's
referee Python: the LibriSpeech repacking (convert_librispeech.py + repackage_librispeech.py),
the manifest reader (manifest.py), and the word error rate of accuracy_eval.py on one accuracy
log. Speech is spoken by espeak-ng in the session (whisper_fixtures.py)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import referee
import whisper_fixtures as wf
from extras import has_extra

from mlharness.errors import DatasetError
from mlharness.speech import audio, labels, repack, wer
from mlharness.speech.manifest import MANIFEST_NAME, read_manifest, relocated

S2T = "speech2text"
pytestmark = pytest.mark.skipif(not has_extra("soundfile"), reason="soundfile missing")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The session's LibriSpeech tree and our repacked dataset of it."""
    return wf.session_data(tmp_path_factory)


def _official_repack_jobs(data, tmp: Path) -> list[tuple[Path, list[str], Path]]:
    """download_dataset.sh's steps after the download, with the official scripts (jobs of
    ``wf.referee_scripts``: convert_librispeech.py, then repackage_librispeech.py), writing
    ``tmp/MANIFEST_NAME``."""
    dev_all = tmp / "LibriSpeech" / "dev-all"
    dev_all.mkdir(parents=True)
    for subset in repack.SUBSETS:  # "cp -r dev-clean/* dev-other/* dev-all/"
        for speaker in (data["librispeech"] / subset).iterdir():
            shutil.copytree(speaker, dev_all / speaker.name)
    utils = referee.INFERENCE / S2T / "utils"
    wf.need_program("sox")  # preprocessing_utils.py runs the sox program
    return [(utils, [str(utils / "convert_librispeech.py"), "--input_dir", str(dev_all),
                     "--dest_dir", str(tmp / "dev-all"), "--output_json",
                     str(tmp / "dev-all.json"), "--parallel", "1"], tmp / "convert.out"),
            (tmp, [str(utils / "repackage_librispeech.py"), "--manifest",
                   str(tmp / "dev-all.json"), "--data_dir", str(tmp), "--output_dir",
                   str(tmp / "dev-all-repack"), "--output_json", str(tmp / MANIFEST_NAME)],
             tmp / "repackage.out")]


def _wer_case(data, folder: Path) -> Path:
    """What a model might say of the session's clips (a word wrong, words joined and split,
    numbers spelt, punctuation, an empty answer), logged in completion order in ``folder``."""
    clips = read_manifest(data["manifest"], data["data"]).clips
    said = [c.transcript for c in clips]
    hyps = [said[0].replace("quilter", "quilt her").replace("gospel", "gossip"),
            " " + said[1].upper().replace("staircase", "stair case").replace("less than",
                                                                             "lessthan"),
            "",  # an empty answer (every reference word an error)
            "Twenty five dollars, 10% and the third of may? As I approached the city, I heard "
            "bells ringing."]
    order = [3, 1, 0, 2]  # LoadGen logs in completion order
    folder.mkdir(parents=True)
    return wf.accuracy_log(folder / "mlperf_log_accuracy.json",
                           [(i, labels.encode(hyps[i])) for i in order])


def _hand_case(folder: Path) -> tuple[Path, Path]:
    """Three clips of 6, 6 and 2 reference words with 1, 0 and 2 errors: the log, the manifest."""
    refs = ["the cat sat on the mat", "every day is a new day", "hello world"]
    hyps = ["the cat sat on a mat",  # one substitution
            "everyday is a new day",  # two reference words joined into one: a match
            ""]  # two deletions
    entries = [{"transcript": r, "files": [{"fname": f"dev-all-repack/c{i}.wav", "speed": 1,
                                           "duration": 1.0}],
                "original_duration": 1.0} for i, r in enumerate(refs)]
    folder.mkdir(parents=True)
    manifest = folder / MANIFEST_NAME
    manifest.write_text(json.dumps(entries))
    log = wf.accuracy_log(folder / "mlperf_log_accuracy.json",
                          [(i, labels.encode(h)) for i, h in enumerate(hyps)])
    return log, manifest


@pytest.fixture(scope="module")
def official(data, tmp_path_factory):
    """The official scripts this module compares with, in one process of whisper's referee
    Python: the repacking, the manifest reader (whisper_referee_manifest.py) and
    accuracy_eval.py on two logs. What each wrote, by name."""
    tmp = tmp_path_factory.mktemp("whisper_official")
    cases = {"wer": _wer_case(data, tmp / "wer"), "hand": _hand_case(tmp / "hand")}
    s2t = referee.INFERENCE / S2T
    for script in ("utils/convert_librispeech.py", "utils/repackage_librispeech.py",
                   "accuracy_eval.py", "manifest.py"):
        referee.require(f"{S2T}/{script}")
    jobs = _official_repack_jobs(data, tmp / "repack")
    jobs.append((tmp, [str(Path(__file__).with_name("whisper_referee_manifest.py")), str(s2t),
                       str(data["data"]), str(data["manifest"])], tmp / "manifest.out"))
    jobs.append((tmp, [str(s2t / "accuracy_eval.py"), "--log_dir", str(tmp / "wer"),
                       "--dataset_dir", str(data["data"]), "--manifest", str(data["manifest"])],
                 tmp / "wer.out"))
    jobs.append((tmp, [str(s2t / "accuracy_eval.py"), "--log_dir", str(tmp / "hand"),
                       "--dataset_dir", str(tmp / "hand"), "--manifest",
                       str(cases["hand"][1])], tmp / "hand.out"))
    wf.referee_scripts(jobs, tmp)
    last = {name: (tmp / f"{name}.out").read_text().strip().splitlines()[-1]
            for name in ("manifest", "wer", "hand")}
    return {**cases, "manifest": last["manifest"], "wer_line": last["wer"],
            "hand_line": last["hand"], "repack_manifest": tmp / "repack" / MANIFEST_NAME}


@pytest.mark.slow
def test_repacked_clips_equal_the_reference_scripts(data, official):
    ours = json.loads(data["manifest"].read_text())
    # 84-121123 packs into two clips, 1272-128104 loses its utterance over 30 s
    assert [Path(e["files"][0]["fname"]).name for e in ours] == [
        "1272-128104_0.wav", "84-121123_0.wav", "84-121123_1.wav", "116-288045_0.wav"]
    assert all(e["original_duration"] <= 30 for e in ours)
    assert ours[1]["transcript"].startswith("go, do you hear? but in less than five minutes")
    manifest = official["repack_manifest"]
    theirs = {Path(e["files"][0]["fname"]).name: e for e in json.loads(manifest.read_text())}
    assert sorted(theirs) == sorted(Path(e["files"][0]["fname"]).name for e in ours)
    for entry in ours:
        name = Path(entry["files"][0]["fname"]).name
        official = theirs[name]
        assert entry["transcript"] == official["transcript"], name
        ours_file = {k: v for k, v in entry["files"][0].items() if k != "fname"}
        assert ours_file == {k: v for k, v in official["files"][0].items() if k != "fname"}
        assert {k: v for k, v in entry.items() if k != "files"} == \
            {k: v for k, v in official.items() if k != "files"}
        # the clip files hold the same samples (bytes may differ only in the WAV header)
        import soundfile as sf
        mine, _ = sf.read(str(data["data"] / entry["files"][0]["fname"]), dtype="int16")
        ref, _ = sf.read(official["files"][0]["fname"], dtype="int16")
        np.testing.assert_array_equal(mine, ref, err_msg=name)


def test_manifest_reader_equals_the_official_one(data, official):
    ours = read_manifest(data["manifest"], data["data"])
    theirs = json.loads(official["manifest"])
    assert len(ours.clips) == len(theirs["clips"]) == 4
    for clip, (path, duration, indices) in zip(ours.clips, theirs["clips"]):
        assert str(clip.audio) == path
        assert clip.duration == duration
        assert labels.reference_indices(clip.transcript) == indices
    assert ours.filtered_duration == theirs["filtered"] == 0.0
    # the audio as the reference loads it: 16 kHz float32, what the clip file holds
    samples = audio.load(ours.clips[0].audio)
    assert samples.dtype == np.float32 and len(samples) == round(ours.clips[0].duration * 16000)


def test_manifest_filters_long_clips_and_relocates_absolute_paths(data, tmp_path):
    entries = json.loads(data["manifest"].read_text())
    entries[0]["original_duration"] = 31.0  # left out, as the reference leaves it out
    for e in entries:  # the reference's container writes absolute paths
        e["files"][0]["fname"] = "/data/" + e["files"][0]["fname"]
    moved = tmp_path / MANIFEST_NAME
    moved.write_text(json.dumps(entries))
    found = read_manifest(moved, data["data"])
    assert len(found.clips) == 3 and found.filtered_duration == 31.0
    assert str(found.clips[0].audio).startswith("/data/dev-all-repack/")
    fixed = relocated(found)
    assert fixed.clips[0].audio == data["data"] / "dev-all-repack" / "84-121123_0.wav"
    (data["data"] / "dev-all-repack" / "84-121123_1.wav").rename(tmp_path / "gone.wav")
    try:
        with pytest.raises(DatasetError, match="clip 1 .* no audio at"):
            relocated(found)
    finally:
        (tmp_path / "gone.wav").rename(data["data"] / "dev-all-repack" / "84-121123_1.wav")


def _ours(log: Path, manifest_path: Path) -> wer.WordErrorRate:
    manifest = read_manifest(manifest_path)
    entries = json.loads(log.read_text())
    hyps = [labels.decode_response(bytes.fromhex(e["data"])) for e in entries]
    refs = [labels.decode(labels.reference_indices(manifest.clips[e["qsl_idx"]].transcript))
            for e in entries]
    return wer.word_error_rate(hyps, refs)


def test_wer_equals_accuracy_eval(data, official):
    ours = _ours(official["wer"], data["manifest"])
    assert ours.accuracy_line() == official["wer_line"]
    assert 0 < ours.wer < 1 and ours.clips == 4


def test_a_hand_counted_wer(official):
    """Three clips of 6, 6 and 2 reference words with 1, 0 and 2 errors: WER 3/14."""
    ours = _ours(*official["hand"])
    assert (ours.errors, ours.words) == (3, 14)
    assert ours.accuracy_line() == f"Word Error Rate: {3 / 14 * 100}%, accuracy={11 / 14 * 100}%"
    line = official["hand_line"]
    assert line == ours.accuracy_line()
    # the checker's pattern (constants.py ACCURACY) reads the same accuracy back
    found = re.search(r"Word Error Rate\:.*, accuracy=([0-9\.]+)%", line)
    assert found and float(found.group(1)) == pytest.approx(100 * 11 / 14)


def test_labels_encode_as_the_reference_sut():
    # lower-cased, stripped, characters outside the labels dropped (reference_SUT.py)
    assert labels.decode(labels.transcript_indices("  Hello, World! 25% +1 - Ünï  ")) == \
        "hello world 25% +1 - n"
    data = labels.encode("It's $5")
    assert np.frombuffer(data, dtype=np.int64).tolist() == [9, 20, 27, 19, 0, 38, 33]
    assert labels.decode_response(data) == "it's $5"
    with pytest.raises(DatasetError, match="outside whisper's 42 labels"):
        labels.decode_response(np.asarray([1, 42], dtype=np.int64).tobytes())
    with pytest.raises(DatasetError, match="not a whole number"):
        labels.decode_response(b"\x01\x02\x03")
