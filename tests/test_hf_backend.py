"""The hf backend on a tiny random-weight Llama built here (``hf_fixtures``), offline: its
streamed ids equal ``model.generate``'s, the first token comes once before the end, requests run
side by side, and failures reach ``on_error`` without ending the backend."""

from __future__ import annotations

import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the llm extra is not installed "
                                            "(pip install 'mlharness[llm]')")
import hf_fixtures as hx  # noqa: E402

transformers = hx.import_transformers()

from mlharness.backends import (BackendOptions, GenerationRequest, backend_options,  # noqa: E402
                                create_backend)
from mlharness.backends import is_streaming  # noqa: E402
from mlharness.errors import ConfigError, ModelError  # noqa: E402

PROMPT = (hx.BOS, 5, 9, 4, 12)
WAIT_S = 20.0


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hx.tiny_llama(tmp_path_factory.mktemp("tiny_llama"))


@pytest.fixture(scope="module")
def reference(model_dir: Path):
    """The saved model, loaded the ordinary way, for what ``generate`` gives directly."""
    return transformers.AutoModelForCausalLM.from_pretrained(model_dir,
                                                              local_files_only=True).eval()


def greedy(model, ids: list[int] | tuple[int, ...], n: int, **kwargs) -> list[int]:
    prompt = torch.tensor([list(ids)])
    with torch.inference_mode():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n,
                             do_sample=False, pad_token_id=hx.EOS, **kwargs)
    return out[0, prompt.shape[1]:].tolist()


@dataclass
class Calls:
    """Every callback one request received, in order."""

    events: list[tuple[str, object]] = field(default_factory=list)
    finished: threading.Event = field(default_factory=threading.Event)

    def first(self, ids: list[int]) -> None:
        self.events.append(("first", ids))

    def done(self, ids: list[int]) -> None:
        self.events.append(("done", ids))
        self.finished.set()

    def error(self, message: str) -> None:
        self.events.append(("error", message))
        self.finished.set()

    def wait(self) -> list[tuple[str, object]]:
        assert self.finished.wait(WAIT_S), f"no completion: {self.events}"
        return self.events


def loaded(model_dir: Path, **extra) -> object:
    backend = create_backend("hf")
    backend.load(model_dir, BackendOptions(threads=1, extra=extra))
    return backend


def submit(backend, calls: Calls | None = None, **request) -> Calls:
    calls = calls or Calls()
    request = {"input_ids": PROMPT, "text": None, "max_new_tokens": 6} | request
    backend.submit(GenerationRequest(**request), calls.first, calls.done, calls.error)
    return calls


def test_greedy_streams_what_generate_returns(model_dir: Path, reference) -> None:
    backend = loaded(model_dir)
    try:
        assert is_streaming(backend) and backend.inputs is None and backend.concurrency == 1
        want = greedy(reference, PROMPT, 6)
        assert submit(backend).wait() == [("first", want[:1]), ("done", want)]
        # top_k 1 is greedy whatever the temperature
        assert submit(backend, temperature=0.7, top_k=1).wait()[-1] == ("done", want)
        sampled = submit(backend, temperature=0.8, top_p=0.9, top_k=-1, max_new_tokens=5).wait()
        assert [e[0] for e in sampled] == ["first", "done"] and 1 <= len(sampled[1][1]) <= 5
        info = backend.describe()
        assert info["name"] == "hf" and info["dtype"] == "float32" and info["concurrency"] == 1
        assert info["model"] == str(model_dir) and info["tokenizer"] is True
        assert type(backend).framework() == (f"transformers {transformers.__version__} "
                                             f"(torch {torch.__version__})")
    finally:
        backend.close()


def test_eos_override_and_min_new_tokens(model_dir: Path, reference) -> None:
    """The first greedy token made the end-of-sequence token: generation stops at it unless
    ``min_new_tokens`` holds it back (1, the default, already does: no empty answer)."""
    stop = greedy(reference, PROMPT, 1)[0]
    backend = loaded(model_dir, eos_token_id=stop)
    try:
        assert backend.describe()["eos_token_id"] == stop
        assert submit(backend, max_new_tokens=8, min_new_tokens=0).wait()[-1] == ("done", [stop])
        assert submit(backend, max_new_tokens=8).wait()[-1][1][0] != stop
        ids = submit(backend, max_new_tokens=8, min_new_tokens=4).wait()[-1][1]
        assert len(ids) >= 4 and stop not in ids[:3]
        assert ids == greedy(reference, PROMPT, 8, min_new_tokens=4, eos_token_id=stop)
    finally:
        backend.close()


def test_text_prompt_is_tokenized(model_dir: Path, reference, tmp_path: Path) -> None:
    text = hx.PROMPTS[0]
    ids = transformers.AutoTokenizer.from_pretrained(model_dir)(text)["input_ids"]
    assert ids[0] == hx.BOS and hx.SPECIALS.index("<unk>") not in ids
    backend = loaded(model_dir)
    try:
        got = submit(backend, input_ids=None, text=text).wait()
        assert got[-1] == ("done", greedy(reference, ids, 6))
    finally:
        backend.close()
    bare = tmp_path / "no_tokenizer"
    bare.mkdir()
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copy(model_dir / name, bare)
    backend = loaded(bare)
    try:
        [(kind, message)] = submit(backend, input_ids=None, text=text).wait()
        assert kind == "error" and "needs a tokenizer" in str(message)
        assert submit(backend).wait()[-1][0] == "done"  # token ids need none
    finally:
        backend.close()


def test_concurrency_runs_requests_side_by_side(model_dir: Path) -> None:
    """Each request's first token waits for another request's: only two at once get past."""
    backend = loaded(model_dir, concurrency=2)
    together = threading.Barrier(2, timeout=WAIT_S)
    try:
        assert backend.concurrency == 2 and backend.describe()["concurrency"] == 2
        calls = [Calls() for _ in range(4)]
        for c in calls:
            c.first = lambda ids, c=c: (together.wait(), c.events.append(("first", ids)))
            submit(backend, c, max_new_tokens=3)
        for c in calls:
            assert [e[0] for e in c.wait()] == ["first", "done"]
    finally:
        backend.close()


def test_a_failed_request_does_not_end_the_backend(model_dir: Path) -> None:
    backend = loaded(model_dir)
    try:
        [(kind, message)] = submit(backend, input_ids=(hx.BOS, hx.VOCAB + 5)).wait()
        assert kind == "error" and message.startswith("generation failed: IndexError")
        assert "\n" not in message
        assert submit(backend).wait()[-1][0] == "done"
        # a callback that raises is the caller's: logged, and the worker goes on
        broken = Calls()
        broken.first = lambda ids: 1 / 0  # inside generate: the request fails
        assert submit(backend, broken).wait()[-1][1].startswith("generation failed: ZeroDivision")
        assert submit(backend).wait()[-1][0] == "done"
    finally:
        backend.close()


def test_close_fails_queued_requests_and_joins_its_threads(model_dir: Path) -> None:
    before = threading.active_count()
    backend = loaded(model_dir)
    assert threading.active_count() == before + 1
    entered, release = threading.Event(), threading.Event()
    held = Calls()
    held.first = lambda ids: (entered.set(), release.wait(WAIT_S))
    submit(backend, held, max_new_tokens=50)
    assert entered.wait(WAIT_S)
    queued = [submit(backend) for _ in range(3)]
    closer = threading.Thread(target=backend.close)
    closer.start()
    deadline = time.monotonic() + WAIT_S
    while not backend._closing.is_set() and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    closer.join(WAIT_S)
    assert not closer.is_alive()
    assert held.wait() == [("error", "backend closed")]  # stopped after its first token
    assert [c.wait() for c in queued] == [[("error", "backend closed")]] * 3
    assert submit(backend).wait() == [("error", "backend closed")]
    assert threading.active_count() == before


def test_bf16(model_dir: Path) -> None:
    backend = create_backend("hf")
    backend.load(model_dir, BackendOptions(threads=1, precision="bf16"))
    try:
        assert backend.model.dtype == torch.bfloat16 and backend.describe()["dtype"] == "bfloat16"
        assert [e[0] for e in submit(backend).wait()] == ["first", "done"]
    finally:
        backend.close()


def test_load_refusals(model_dir: Path, tmp_path: Path) -> None:
    backend = create_backend("hf")
    for bad in (None, tmp_path / "missing", tmp_path):
        with pytest.raises(ModelError, match="no Hugging Face model directory") as err:
            backend.load(bad, BackendOptions())
        assert "--model DIR" in err.value.hint
    shutil.copy(model_dir / "config.json", tmp_path)  # a config without weights
    with pytest.raises(ModelError, match="transformers cannot load"):
        backend.load(tmp_path, BackendOptions())
    with pytest.raises(ConfigError, match="does not run --precision int8"):
        backend.load(model_dir, BackendOptions(precision="int8"))
    with pytest.raises(ConfigError, match="contradicts --precision"):
        backend.load(model_dir, BackendOptions(extra={"dtype": "bfloat16"}))
    with pytest.raises(ConfigError, match="concurrency"):
        backend.load(model_dir, BackendOptions(extra={"concurrency": 0}))
    with pytest.raises(ConfigError, match="unknown hf backend option"):
        backend_options(backend, {"batch": 4})
    assert not backend._workers  # nothing started by a refused load
