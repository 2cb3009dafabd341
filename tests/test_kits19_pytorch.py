"""3D-UNet on the pytorch backend from the official checkpoint format: the training checkpoint
is a state dict of ``pytorch_checkpoint_SUT.py``'s ``Unet3D`` under ``best_model_state_dict``.

The official class (imported unmodified from the pinned checkout, in a child Python: the module
imports LoadGen and reads ``meta/`` from its working directory) makes a random-weight checkpoint
of the official width; mlharness's module loads it key for key and computes the same output.
Then ``mlharness run --backend pytorch`` on a narrow checkpoint of the same graph."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import referee
from mlharness.cli.main import main
from mlharness.tasks.kits19.cache import VolumeCache
from mlharness.tasks.kits19.cases import case_files
from mlharness.tasks.kits19.window import segment
from synthetic_kits19 import make_kits19

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow

OFFICIAL = """\
import sys
import numpy as np, torch
sys.path.insert(0, sys.argv[1])
from pytorch_checkpoint_SUT import Unet3D
torch.manual_seed(0)
net = Unet3D().eval()
torch.save({"best_model_state_dict": net.state_dict(), "epoch": 1}, sys.argv[2])
x = torch.from_numpy(np.load(sys.argv[3]))
with torch.no_grad():
    np.save(sys.argv[4], net(x).numpy())
"""


@referee.official(f"{referee.KITS19_DIR}/pytorch_checkpoint_SUT.py")
def test_official_checkpoint_loads_key_for_key(tmp_path: Path) -> None:
    from mlharness.backends.pytorch import _state_dict
    from mlharness.backends.torch_archs import detect

    (tmp_path / "meta").symlink_to(referee.INFERENCE / referee.KITS19_DIR / "meta")
    x = np.random.default_rng(0).standard_normal((1, 1, 64, 64, 64), dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    script = tmp_path / "official.py"
    script.write_text(OFFICIAL)
    subprocess.run([sys.executable, str(script), str(referee.INFERENCE / referee.KITS19_DIR),
                    str(tmp_path / "ckpt.pth"), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                   cwd=tmp_path, check=True, capture_output=True, timeout=600)
    state = _state_dict(tmp_path / "ckpt.pth")
    arch = detect(state, "ckpt.pth")
    assert arch.name == "unet3d"
    net = arch.build(state, None).eval()
    net.load_state_dict(state, strict=True)  # every key, no more, no fewer
    with torch.no_grad():
        ours = net(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(ours, np.load(tmp_path / "y.npy"), rtol=1e-5, atol=1e-5)


def test_pytorch_backend_runs_the_windows(tmp_path: Path) -> None:
    from mlharness.backends.torch_unet3d import Unet3D

    data = make_kits19(tmp_path / "data", duplicate=False)
    torch.manual_seed(1)
    net = Unet3D((2, 4)).eval()
    torch.save({"best_model_state_dict": net.state_dict()}, tmp_path / "unet3d.pth")
    out = tmp_path / "runs"
    code = main(["run", "-b", "3d-unet-99", "--backend", "pytorch", "-m",
                 str(tmp_path / "unet3d.pth"), "-d", str(data), "--mode", "accuracy",
                 "--max-samples", "2", "--cache-dir", str(tmp_path / "cache"), "--output-dir",
                 str(out), "--no-progress"])
    assert code in (0, 1)
    [run_dir] = list((out / "3d-unet-99").iterdir())
    log = {e["qsl_idx"]: np.frombuffer(bytes.fromhex(e["data"]), np.uint8)
           for e in json.loads((run_dir / "mlperf_log_accuracy.json").read_text())}
    cache = VolumeCache(tmp_path / "cache")

    def predict(windows: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return net(torch.from_numpy(windows)).numpy()

    for index, case in enumerate(case_files(data)[:2]):
        labels = segment(cache.image(case), predict).reshape(-1)
        assert np.mean(log[index] == labels) > 0.9999
