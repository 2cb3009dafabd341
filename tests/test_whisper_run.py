"""Whisper end to end on a random-weight tiny Whisper of large-v3's shape (the real tokenizer,
speech spoken by espeak-ng): the hf backend's batched greedy pass equals a plain step-by-step
argmax without a cache, its features equal openai-whisper's log-mel, and an accuracy run's
accuracy.txt equals accuracy_eval.py run unmodified on the run's own log."""

from __future__ import annotations

import io
import json
import re
import threading

import numpy as np
import pytest
import referee
import whisper_fixtures as wf
from catalogue_support import run_cli
from extras import has_extra

from mlharness.speech import audio, labels
from mlharness.speech.manifest import read_manifest

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (has_extra("torch") and has_extra("soundfile")
                                      and has_extra("whisper")),
                                 reason="the whisper extra is missing")]


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    return {**wf.session_data(tmp_path_factory), "model": wf.session_model(tmp_path_factory)}


def _clips(case) -> list[bytes]:
    return [c.audio.read_bytes() for c in read_manifest(case["manifest"]).clips]


def test_batched_greedy_equals_a_plain_loop(case):
    import torch
    from transformers import WhisperForConditionalGeneration

    from mlharness.backends.hf_whisper import WhisperModel

    runner = WhisperModel(case["model"], "fp32", None)
    prompt = [50258, 50259, 50360, 50364]
    clips = _clips(case)
    limits = [12, 5, 12, 9]  # clips leave the batch at different steps
    firsts: dict[int, list[int]] = {}
    batched = runner.transcribe(clips, prompt, limits, lambda k, ids: firsts.setdefault(k, ids),
                                threading.Event())
    net = WhisperForConditionalGeneration.from_pretrained(case["model"]).eval()
    for k, clip in enumerate(clips):
        ids = list(prompt)
        with torch.inference_mode():
            encoded = net.model.encoder(runner.log_mel([clip])).last_hidden_state
            for _ in range(limits[k]):  # the whole sequence again at every step, no cache
                logits = net(encoder_outputs=(encoded,), decoder_input_ids=torch.tensor([ids]),
                             use_cache=False).logits
                ids.append(int(logits[0, -1].argmax()))
                if ids[-1] == net.config.eos_token_id:
                    break
        assert batched[k] == ids[len(prompt):], k
        assert firsts[k] == batched[k][:1]


def test_features_equal_openai_whispers_log_mel(case):
    import whisper as openai_whisper

    from mlharness.backends.hf_whisper import WhisperModel

    runner = WhisperModel(case["model"], "fp32", None)
    clip = _clips(case)[0]
    ours = runner.log_mel([clip])[0].numpy()
    samples = audio.decode(io.BytesIO(clip))
    theirs = openai_whisper.log_mel_spectrogram(
        openai_whisper.pad_or_trim(samples), n_mels=128).numpy()
    assert ours.shape == theirs.shape == (128, 3000)
    np.testing.assert_allclose(ours, theirs, atol=2e-3)


def test_accuracy_run_equals_accuracy_eval(case, tmp_path, capsys):
    result = run_cli(["run", "-b", "whisper", "--backend", "hf", "--model", case["model"],
                      "--dataset", case["data"], "--mode", "accuracy", "--output-dir", tmp_path,
                      "--task-option", "max_new_tokens=24", "--batch-size", "3"], capsys)
    run_dir = next((tmp_path / "whisper").glob("Offline-accuracy-*"))
    record = json.loads((run_dir / "run.json").read_text())
    assert result.code == 1, (result.out[-2000:], result.err[-2000:])  # below the target
    accuracy = record["accuracy"]
    assert accuracy["metric"] == "ACCURACY" and accuracy["details"]["clips"] == 4
    assert any("max_new_tokens 24" in f for f in accuracy["failures"])
    log = json.loads((run_dir / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in log) == [0, 1, 2, 3]
    for entry in log:  # int64 label indices
        labels.decode_response(bytes.fromhex(entry["data"]))
        assert 1 <= entry["token_count"] <= 24
    line = referee.whisper("speech2text/accuracy_eval.py", "--log_dir", str(run_dir),
                           "--dataset_dir", str(case["data"]), "--manifest",
                           str(case["manifest"])).stdout.strip().splitlines()[-1]
    assert (run_dir / "accuracy.txt").read_text().strip() == line
    # the result screen shows the word error rate against what the target allows
    assert re.search(r"WER \d+\.\d{3}% \(<= 3\.046%\)", result.out), result.out


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_reduced_precision_transcribes(case, precision):
    """bf16 (this CPU's bf16 units, else refused: test below) and dynamic int8 run the same
    batched greedy pass: weights in bf16 / int8 linear layers, each clip's ids end at EOS or
    the limit, the first token first."""
    import torch

    from mlharness.backends.hf_whisper import WhisperModel
    from mlharness.hostinfo import matrix_isa

    if precision == "bf16" and matrix_isa()["bf16"] is None:
        pytest.skip("no bf16 units here: the refusal is tested instead")
    runner = WhisperModel(case["model"], precision, None)
    linear = runner.net.model.decoder.layers[0].fc1
    if precision == "bf16":
        assert linear.weight.dtype == torch.bfloat16
        assert runner.log_mel(_clips(case)[:1]).dtype == torch.bfloat16
    else:
        assert type(linear).__module__.startswith("torch.ao.nn.quantized.dynamic")
    firsts: dict[int, list[int]] = {}
    out = runner.transcribe(_clips(case), [50258, 50259, 50360, 50364], [6, 3, 6, 6],
                            lambda k, ids: firsts.setdefault(k, ids), threading.Event())
    for k, ids in enumerate(out):
        assert 1 <= len(ids) <= [6, 3, 6, 6][k] and firsts[k] == ids[:1]
        assert runner.eos not in ids[:-1]


def test_bf16_is_refused_without_bf16_units(case, monkeypatch):
    """Under oneDNN's ISA cap below bf16 (as on a CPU without AVX512_BF16 or AMX) --precision
    bf16 is one line saying why, before the model loads."""
    from mlharness.backends.base import BackendOptions
    from mlharness.backends.hf_speech import HfSpeech
    from mlharness.errors import ConfigError

    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_VNNI")
    with pytest.raises(ConfigError, match="no bf16 units .* under ONEDNN_MAX_CPU_ISA="
                                          "AVX512_CORE_VNNI"):
        HfSpeech().load(case["model"], BackendOptions(precision="bf16"), 1)


def test_the_batch_size_bounds_each_pass_and_threads_reach_torch(case):
    """--batch-size: a pass takes what is queued, up to the batch size (the knob tune
    searches); --threads: torch's intra-op threads in the worker process."""
    import torch

    from mlharness.backends.base import BackendOptions
    from mlharness.backends.hf_speech import HfSpeech

    speech = HfSpeech()
    for batch, sizes in ((4, [4, 2]), (1, [1] * 6)):
        speech.batch = batch
        for k in range(6):
            speech._queue.put((k, None, None, None))  # type: ignore[arg-type]
        assert [len(speech._take() or []) for _ in sizes] == sizes
    before = torch.get_num_threads()
    loaded = HfSpeech()
    try:
        loaded.load(case["model"], BackendOptions(threads=1, batch_size=8), 1)
        assert torch.get_num_threads() == 1 and loaded.describe()["batch_size"] == 8
    finally:
        loaded.close()
        torch.set_num_threads(before)


def test_tune_finds_the_offline_batch_size(case, tmp_path, capsys, monkeypatch):
    """``tune --search batch_size=1,4``: both tuned with quick Offline probes of the hf
    backend, the faster kept in the SUT configuration with its target. The probes start at 20
    QPS (22 clips, over a second of this tiny model here) instead of a generating benchmark's
    1 QPS, so each setting needs one probe, not two (each probe is a run, a child that imports
    torch); an early-finished probe aiming higher: test_llm_demo.py, test_rounds_e2e.py."""
    from mlharness.tune import offline

    monkeypatch.setattr(offline, "start_qps", lambda spec: 20.0)
    sut = tmp_path / "box.toml"
    result = run_cli(["tune", "-b", "whisper", "--backend", "hf", "-m", case["model"], "-d",
                      case["data"], "-s", "Offline", "--search", "batch_size=1,4", "--threads",
                      "1", "--quick", "--stall-timeout", "300", "--task-option",
                      "max_new_tokens=16", "--output-dir", tmp_path / "runs", "--sut", sut],
                     capsys)
    assert result.code == 0, (result.out[-2000:], result.err[-2000:])
    import tomllib

    entry = tomllib.loads(sut.read_text())["benchmarks"]["whisper"]["Offline"]
    assert entry["target_qps"] > 0 and entry["settings"]["batch_size"] in (1, 4)
    assert entry["settings"]["threads"] == 1 and entry["settings"]["backend"] == "hf"
    assert "batch_size=1" in result.err and "batch_size=4" in result.err
