"""The 3D-UNet reference run once per test module: synthetic KiTS19 cases, a random-weight model
of the official signature, and the official scripts run unmodified in the 3D-UNet referee's
Python (tests/referee.py ``kits19_run``): ``preprocess.py``, ``run.py --backend onnxruntime
--accuracy`` (Offline) and ``accuracy_kits.py`` on its log."""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

import referee
from synthetic_kits19 import make_kits19, unet3d_onnx

MLPERF_CONF = "loadgen/mlperf.conf"


@dataclass
class Reference:
    root: Path
    data: Path
    model: Path             # fixed batch 1, as 3dunet_kits19_128x128x128.onnx
    dynamic_model: Path     # batch_size, as 3dunet_kits19_128x128x128_dynbatch.onnx
    preprocessed: Path      # preprocess.py's results_dir
    log: Path               # run.py's mlperf_log_accuracy.json
    accuracy_line: str      # accuracy_kits.py's "Accuracy: mean = ..." line
    summary: Path           # accuracy_kits.py's summary.csv

    def pickled(self, case: str) -> tuple[np.ndarray, np.ndarray]:
        """preprocess.py's (image, label) of ``case``."""
        with open(self.preprocessed / f"{case}.pkl", "rb") as fh:
            image, label = pickle.load(fh)
        return image, label

    def responses(self) -> dict[int, bytes]:
        """run.py's response bytes by QSL index."""
        entries = json.loads(self.log.read_text())
        return {e["qsl_idx"]: bytes.fromhex(e["data"]) for e in entries}


def build_reference(root: Path) -> Reference:
    data = make_kits19(root / "kits19" / "data")
    model = unet3d_onnx(root / "unet3d.onnx")
    dynamic = unet3d_onnx(root / "unet3d_dynbatch.onnx", batch=None)
    work = root / "reference"
    work.mkdir()
    pre = work / "preprocessed"
    # preprocess.py ends by checking the pickles' MD5 against the real data's
    # (meta/checksum_inference.json): synthetic cases fail that check after they are written
    proc = referee.kits19_run("preprocess.py", "--raw_data_dir", str(data), "--results_dir",
                              str(pre), "--mode", "preprocess", "--num_proc", "2", cwd=work,
                              check=False)
    assert proc.returncode == 0 or "Verification failed, 43/43" in proc.stderr, proc.stderr[-2000:]
    assert (pre / "preprocessed_files.pkl").is_file(), proc.stdout[-2000:]
    logs = work / "logs"
    official = referee.INFERENCE
    referee.kits19_run(
        "run.py", "--backend", "onnxruntime", "--scenario", "Offline", "--accuracy",
        "--model", str(model), "--preprocessed_data_dir", str(pre),
        "--mlperf_conf", str(official / MLPERF_CONF),
        "--user_conf", str(official / referee.KITS19_DIR / "user.conf"),
        cwd=work, env={"LOG_PATH": str(logs), "SKIP_VERIFY_ACCURACY": "1"})
    post = work / "postprocessed"
    out = referee.kits19_run("accuracy_kits.py", "--log_file", str(logs / "mlperf_log_accuracy.json"),
                             "--preprocessed_data_dir", str(pre), "--postprocessed_data_dir",
                             str(post), "--num_proc", "2", cwd=work).stdout
    line = next(x for x in out.splitlines() if x.startswith("Accuracy:"))
    return Reference(root, data, model, dynamic, pre, logs / "mlperf_log_accuracy.json", line,
                     post / "summary.csv")


def ort_predict(model: Path):
    """``windows -> logits`` through an onnxruntime session, as the reference's SUT calls it."""
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return lambda windows: session.run(["output"], {"input": windows})[0]
