"""Bad-input catalogue: models, datasets, flags, TOML files and every command's arguments.

Each case runs the CLI in-process in a scratch workspace and asserts the exit code, one error line
(plus a hint) naming the problem, no traceback, and that nothing in the workspace changed except
a run directory under runs/ (kept, with its record) when the run had started.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import pytest

from catalogue_support import DEMO_DATA, assert_clean_error, run_cli, snapshot

LATIN1 = "caf\xe9 1\n".encode("latin-1")  # not UTF-8


def demo_set(ws: Path, name: str = "digits", lines: str | bytes | None = None,
             count: int = 3) -> Path:
    """A tiny demo-format dataset (real PNGs) with its own val_map.txt."""
    root = ws / name
    root.mkdir()
    src = sorted((DEMO_DATA / "dataset").glob("*.png"))[:count]
    for png in src:
        shutil.copyfile(png, root / png.name)
    if lines is None:
        lines = "".join(f"{p.name} {i % 10}\n" for i, p in enumerate(src))
    data = lines.encode() if isinstance(lines, str) else lines
    (root / "val_map.txt").write_bytes(data)
    return root


def squad(ws: Path, qa_extra: dict | None = None, drop: str | None = None,
          raw: bytes | None = None) -> None:
    """A one-question SQuAD file (squad.json) and a matching vocab.txt."""
    qa = {"id": "q1", "question": "what is it", "answers": [{"text": "a cat", "answer_start": 0}]}
    qa.update(qa_extra or {})
    if drop:
        qa.pop(drop)
    data = {"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": "a cat sat on the mat", "qas": [qa]}]}]}
    (ws / "squad.json").write_bytes(raw if raw is not None else json.dumps(data).encode())
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "cat", "sat", "on", "the", "mat",
             "what", "is", "it"]
    (ws / "vocab.txt").write_text("\n".join(words) + "\n")


def openimages(ws: Path, data: object | None = None, raw: bytes | None = None) -> None:
    ann = ws / "oi" / "annotations"
    ann.mkdir(parents=True)
    if data is None:
        data = {"images": [{"id": 1, "file_name": "a.jpg", "height": 10, "width": 10}],
                "annotations": [], "categories": [{"id": 1, "name": "x"}]}
    body = raw if raw is not None else json.dumps(data).encode()
    (ann / "openimages-mlperf.json").write_bytes(body)


def write(name: str, body: str | bytes) -> Callable[[Path], None]:
    def setup(ws: Path) -> None:
        path = ws / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(body, bytes):
            path.write_bytes(body)
        else:
            path.write_text(body)
    return setup


def both(*setups: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(ws: Path) -> None:
        for s in setups:
            s(ws)
    return setup


RUN = ["run", "--no-progress", "--output-dir", "runs"]
DEMO = [*RUN, "-b", "demo"]
BERT = [*RUN, "-b", "bert-99", "--dataset", "squad.json", "--vocab", "vocab.txt",
        "--cache-dir", "cache"]
OI = [*RUN, "-b", "retinanet", "--dataset", "oi", "--cache-dir", "cache"]

CASES = [
    # ---- top level and flags ------------------------------------------------------------------
    ("no-command", [], None, 2, "usage:"),
    ("unknown-command", ["frobnicate"], None, 2, "invalid choice"),
    ("run-no-benchmark", RUN, None, 2, "no benchmark given"),
    ("run-unknown-benchmark", [*RUN, "-b", "resnet51"], None, 2, "resnet51"),
    ("run-task-module-missing", [*RUN, "-b", "nosuch_module:task"], None, 2,
     "cannot create task"),
    ("run-task-factory-missing", [*RUN, "-b", "faulty_tasks:nothing"], None, 2,
     "cannot create task"),
    ("run-task-factory-raises", [*RUN, "-b", "faulty_tasks:raising_factory"], None, 2,
     "injected failure in the task factory"),
    ("run-backend-class-raises", [*DEMO, "--backend", "faulty_backends:FailingBackend",
                                  "--backend-option", "x=1", "--model", "junk.onnx"],
     write("junk.onnx", "x"), 2, "onnxruntime cannot load"),
    ("run-unknown-scenario", [*DEMO, "-s", "Batch"], None, 2, "Batch"),
    ("run-unknown-mode", [*DEMO, "--mode", "fast"], None, 2, "invalid choice"),
    ("run-qps-not-a-number", [*DEMO, "--target-qps", "lots"], None, 2, "expected a number"),
    ("run-set-without-equals", [*DEMO, "--set", "min_duration"], None, 2, "KEY=VALUE"),
    ("run-backend-option-without-equals", [*DEMO, "--backend-option", "threads"], None, 2,
     "KEY=VALUE"),
    ("calibrate-task-option-without-equals", ["calibrate", "-b", "demo", "--model", "m.onnx",
                                              "--dataset", ".", "--task-option", "x"], None, 2,
     "KEY=VALUE"),
    ("serve-backend-option-without-equals", ["serve", "-b", "demo", "--port", "8101",
                                             "--backend-option", "x"], None, 2, "KEY=VALUE"),
    ("run-unknown-backend", [*DEMO, "--backend", "tensorrt-9"], None, 2, "unknown backend"),
    ("run-valid-without-target", [*DEMO, "-s", "Server", "--valid"], None, 2,
     "mlharness tune"),
    ("run-target-latency-word", [*DEMO, "-s", "SingleStream", "--target-latency", "fast"], None,
     2, "expected a number or 'auto'"),
    # the field as the user named it, not pydantic's union member ("target_qps.constrained-float")
    ("run-qps-negative", [*DEMO, "-s", "Server", "--target-qps=-5"], None, 2,
     "target_qps must be > 0.0, got -5.0"),
    ("run-batch-size-not-int", [*DEMO, "--batch-size", "big"], None, 2, "invalid int"),
    ("run-division-unknown", [*DEMO, "--division", "premier"], None, 2, "invalid choice"),
    # ---- TOML ---------------------------------------------------------------------------------
    ("toml-missing", [*RUN, "--config", "nope.toml"], None, 2, "config file not found"),
    ("toml-syntax", [*RUN, "--config", "bad.toml"], write("bad.toml", "benchmark = \n"), 2,
     "fix the TOML syntax"),
    ("toml-not-utf8", [*RUN, "--config", "l1.toml"],
     write("l1.toml", b'benchmark = "caf\xe9"\n'), 2, "not UTF-8"),
    ("toml-unknown-key", [*RUN, "--config", "k.toml"],
     write("k.toml", 'benchmark = "demo"\nturbo = true\n'), 2, "turbo"),
    ("toml-wrong-type", [*RUN, "--config", "t.toml"],
     write("t.toml", 'benchmark = "demo"\nbatch_size = "big"\n'), 2, "bad settings"),
    ("toml-is-a-directory", [*RUN, "--config", "confdir"],
     lambda ws: (ws / "confdir").mkdir(), 2, "config file not found"),
    # ---- model --------------------------------------------------------------------------------
    ("model-missing", [*DEMO, "--model", "none.onnx"], None, 2, "model file not found"),
    ("model-not-onnx", [*DEMO, "--model", "junk.onnx"], write("junk.onnx", "not a model"), 2,
     "onnxruntime cannot load"),
    ("model-is-a-directory", [*DEMO, "--model", "mdir"], lambda ws: (ws / "mdir").mkdir(), 2,
     "model file not found"),
    # ---- demo / ImageNet-layout dataset -------------------------------------------------------
    ("dataset-missing", [*DEMO, "--dataset", "nowhere"], None, 2, "dataset directory not found"),
    ("dataset-no-val-map", [*DEMO, "--dataset", "digits"],
     lambda ws: (demo_set(ws) / "val_map.txt").unlink(), 2, "val_map.txt not found"),
    ("val-map-not-utf8", [*DEMO, "--dataset", "digits"], lambda ws: demo_set(ws, lines=LATIN1),
     2, "not UTF-8"),
    ("val-map-bad-line", [*DEMO, "--dataset", "digits"],
     lambda ws: demo_set(ws, lines="digit_00000.png one\n"), 2, "expected '<image file> <label>'"),
    ("val-map-empty", [*DEMO, "--dataset", "digits"], lambda ws: demo_set(ws, lines=""), 2,
     "lists no images"),
    ("val-map-parent-path", [*DEMO, "--dataset", "digits"],
     both(lambda ws: demo_set(ws, lines="../outside.png 1\n"),
          lambda ws: shutil.copyfile(DEMO_DATA / "dataset" / "digit_00000.png",
                                     ws / "outside.png")), 2, "outside the dataset folder"),
    ("val-map-absolute-path", [*DEMO, "--dataset", "digits"],
     lambda ws: demo_set(ws, lines="/etc/hostname 1\n"), 2, "outside the dataset folder"),
    ("val-map-missing-image", [*DEMO, "--dataset", "digits"],
     lambda ws: demo_set(ws, lines="digit_99999.png 1\n"), 2, "missing"),
    ("image-not-an-image", [*DEMO, "--dataset", "digits", "--mode", "accuracy"],
     lambda ws: demo_set(ws, lines="fake.png 1\n") and (ws / "digits" / "fake.png").write_text(
         "text"), 3, "cannot identify image file"),
    ("cache-dir-is-a-file", [*DEMO, "--cache-dir", "cachefile"], write("cachefile", "x"), 2,
     "--cache-dir"),
    ("bert-cache-dir-is-a-file", [*BERT[:-2], "--cache-dir", "cachefile"],
     both(squad, write("cachefile", "x")), 2, "--cache-dir"),
    ("output-dir-is-a-file", [*RUN[:-1], "outfile", "-b", "demo"], write("outfile", "x"), 2,
     "outfile"),
    # ---- SQuAD / BERT -------------------------------------------------------------------------
    ("bert-no-vocab", [*RUN, "-b", "bert-99", "--dataset", "squad.json"], squad, 2,
     "needs --vocab"),
    ("squad-missing", BERT, lambda ws: (squad(ws), (ws / "squad.json").unlink()), 2,
     "not found"),
    ("squad-not-json", BERT, lambda ws: squad(ws, raw=b"{"), 2, "not valid json"),
    ("squad-not-utf8", BERT, lambda ws: squad(ws, raw=b'{"data": "\xe9"}'), 2, "squad.json"),
    ("squad-no-data", BERT, lambda ws: squad(ws, raw=b'{"version": "1.1"}'), 2,
     "no top-level 'data' list"),
    ("squad-no-answers", BERT, lambda ws: squad(ws, drop="answers"), 2, "answers"),
    ("squad-empty-answers", BERT, lambda ws: squad(ws, {"answers": []}), 2, "answers"),
    ("squad-no-question", BERT, lambda ws: squad(ws, drop="question"), 2, "question"),
    ("vocab-not-utf8", BERT, lambda ws: (squad(ws), (ws / "vocab.txt").write_bytes(LATIN1)), 2,
     "not UTF-8"),
    ("vocab-no-special-tokens", BERT,
     lambda ws: (squad(ws), (ws / "vocab.txt").write_text("a\ncat\n")), 2,
     "lacks the special tokens"),
    # ---- OpenImages ---------------------------------------------------------------------------
    ("annotations-missing", OI, lambda ws: (ws / "oi").mkdir(), 2, "annotation file not found"),
    ("annotations-not-utf8", OI, lambda ws: openimages(ws, raw=b'{"images": "\xe9"}'), 2,
     "openimages-mlperf.json"),
    ("annotations-not-json", OI, lambda ws: openimages(ws, raw=b"[1,"), 2, "cannot read"),
    ("annotations-a-list", OI, lambda ws: openimages(ws, data=[1, 2]), 2, "lists no images"),
    ("annotations-no-categories", OI,
     lambda ws: openimages(ws, data={"images": [{"id": 1, "file_name": "a.jpg", "height": 1,
                                                  "width": 1}], "annotations": []}), 2,
     "categories"),
    ("annotations-escaping-file", OI,
     lambda ws: openimages(ws, data={"images": [{"id": 1, "file_name": "../../x.jpg",
                                                  "height": 1, "width": 1}],
                                     "annotations": [], "categories": []}), 2,
     "outside the dataset folder"),
    # ---- system -------------------------------------------------------------------------------
    ("system-no-action", ["system"], None, 2, "usage:"),
    ("system-name-escapes", ["system", "detect", "--name", "../../x", "--output", "out"], None,
     2, "bad system name"),
    ("system-name-absolute", ["system", "detect", "--name", "{ws}/x", "--output", "out"], None,
     2, "bad system name"),  # {ws}: the workspace, so the name is an absolute path
    ("system-from-missing", ["system", "detect", "--name", "s", "--from", "none.toml",
                             "--output", "out"], None, 2, "none.toml"),
    ("system-from-bad-toml", ["system", "detect", "--name", "s", "--from", "b.toml",
                              "--output", "out"], write("b.toml", "x = = 1"), 2, "b.toml"),
    ("system-exists", ["system", "detect", "--name", "s", "--output", "out"],
     write("out/s.json", "{}"), 2, "exists"),
    ("system-template-exists", ["system", "template", "--output", "t.toml"], write("t.toml", ""),
     2, "exists"),
    ("system-output-is-a-file", ["system", "detect", "--name", "s", "--output", "outfile"],
     write("outfile", "x"), 2, "outfile"),
    # ---- compliance ---------------------------------------------------------------------------
    ("compliance-no-reference", ["compliance", "--reference-perf", "nope", "--output", "o"], None,
     2, "no such directory"),
    ("compliance-reference-json-list", ["compliance", "--reference-perf", "ref", "--output", "o"],
     write("ref/run.json", "[1, 2]"), 2, "not an object"),
    ("compliance-reference-not-json", ["compliance", "--reference-perf", "ref", "--output", "o"],
     write("ref/run.json", "{"), 2, "unreadable run.json"),
    ("compliance-unknown-test", ["compliance", "--test", "TEST99", "--reference-perf", "ref",
                                 "--output", "o", "-b", "demo"],
     write("ref/keep", ""), 2, "TEST99"),
    # ---- check --------------------------------------------------------------------------------
    ("check-missing-root", ["check", "nowhere"], None, 2, "not found"),
    ("check-unknown-round", ["check", ".", "--round", "v0.1"], None, 2, "invalid choice"),
    ("check-not-an-archive", ["check", "tree.tar.gz"], write("tree.tar.gz", "not gzip"), 2,
     "cannot read the archive"),
    ("check-archive-with-official", ["check", "tree.tar.gz", "--official", "."],
     write("tree.tar.gz", "x"), 2, "--official checks a tree"),
]


#: inputs refused before the probe runs that measure the demo's target would start (and leave
#: their folders under runs/_tune); what only loading tells (a file that is no model, an image
#: missing from the list: the task's prepare) is found by the first probe
REFUSED_BEFORE_PROBES = {"run-unknown-backend", "model-missing", "model-is-a-directory",
                         "dataset-missing", "dataset-no-val-map",
                         "val-map-parent-path", "bert-no-vocab", "squad-missing"}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_clear_line(case, tmp_path: Path, capsys, monkeypatch):
    _, argv, setup, code, fragment = case
    ws = tmp_path / "ws"
    ws.mkdir()
    argv = [a.replace("{ws}", str(ws)) if isinstance(a, str) else a for a in argv]
    (ws / "keep.txt").write_text("untouched")
    if setup:
        setup(ws)
    monkeypatch.chdir(ws)
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "default-cache"))
    before = snapshot(tmp_path)
    result = run_cli(argv, capsys)
    if fragment == "usage:":  # no command: the help, exit 2
        assert result.code == 2 and "usage:" in result.out + result.err
    elif code == 3:  # the run started and failed: one "run failed:" line, logs kept
        assert result.code == 3 and "Traceback" not in result.out + result.err
        text = " ".join(result.out.split())
        assert "run failed:" in text and fragment in text, text
    else:
        assert_clean_error(result, code, fragment)
    # nothing changed but a run directory (kept with its record when the run had started)
    assert snapshot(tmp_path, skip=("ws/runs", "default-cache", "ws/cache")) == before
    for record in (ws / "runs").rglob("run.json"):
        assert json.loads(record.read_text())["status"] in ("error", "failed")
    if case[0] in REFUSED_BEFORE_PROBES:  # a run without a target measures it first: not these
        assert "probe runs" not in result.out and not (ws / "runs").exists(), result.out


def test_debug_after_the_subcommand_shows_the_traceback(tmp_path: Path, monkeypatch):
    from mlharness.cli.main import main
    from mlharness.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    for argv in (["run", "--debug", "--no-progress"], ["--debug", "run", "--no-progress"],
                 ["system", "detect", "--debug", "--name", "../x"]):
        with pytest.raises(ConfigError):
            main(argv)
