"""3D-UNet equal to the official scripts run unmodified (tests/kits19_support.py): the
pre-processing voxel for voxel, the sliding-window labels voxel for voxel on the same model (one
window per call and batches of windows), DICE equal to ``accuracy_kits.py`` on the same log."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import referee
from kits19_support import Reference, build_reference, ort_predict
from mlharness.tasks.kits19.cache import VolumeCache
from mlharness.tasks.kits19.cases import INFERENCE_CASES, case_files
from mlharness.tasks.kits19.dice import DiceSummary, case_dice, decode
from mlharness.tasks.kits19.window import segment, window_count

K = referee.KITS19_DIR
pytestmark = [referee.official(f"{K}/preprocess.py", f"{K}/run.py", f"{K}/accuracy_kits.py",
                               "loadgen/mlperf.conf", kits19=True),
              pytest.mark.slow]


@pytest.fixture(scope="module")
def ref(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    return build_reference(tmp_path_factory.mktemp("kits19ref"))


@pytest.fixture(scope="module")
def cache(ref: Reference, tmp_path_factory: pytest.TempPathFactory) -> VolumeCache:
    cache = VolumeCache(tmp_path_factory.mktemp("kits19cache"))
    seen: list[tuple[int, int, str]] = []
    built = cache.build(case_files(ref.data), progress=lambda d, t, w: seen.append((d, t, w)),
                        workers=1)
    # six distinct cases: the links and the duplicate case_00400 share their sources' entries
    assert built == 6
    assert seen[-1] == (6, 6, "pre-processing KiTS19")
    return cache


def test_preprocessing_equals_preprocess_py(ref: Reference, cache: VolumeCache) -> None:
    for case in case_files(ref.data):
        image, label = ref.pickled(case.name)
        ours_image, ours_label = cache.image(case), cache.label(case)
        assert ours_image.dtype == image.dtype == np.float32, case.name
        assert ours_label.dtype == label.dtype == np.uint8, case.name
        np.testing.assert_array_equal(ours_image, image, err_msg=case.name)
        np.testing.assert_array_equal(ours_label, label, err_msg=case.name)


def test_labels_equal_run_py_voxel_for_voxel(ref: Reference, cache: VolumeCache) -> None:
    """The cases of several windows, one window a call and in batches (every case goes through
    the whole harness in test_mlharness_run_equals_the_reference_end_to_end)."""
    responses = ref.responses()
    assert sorted(responses) == list(range(len(INFERENCE_CASES)))
    single, batched = ort_predict(ref.model), ort_predict(ref.dynamic_model)
    seen: set[Path] = set()
    for index, case in enumerate(case_files(ref.data)):
        image = cache.image(case)
        if window_count(image.shape[1:]) == 1 or case.imaging.resolve() in seen:
            continue
        seen.add(case.imaging.resolve())
        if len(seen) == 1:
            labels = segment(image, single, batch_size=1, overlap=False)
            assert labels.tobytes() == responses[index], case.name
        # batches of 3 (a short last batch for 4 windows), summed while the next call runs
        assert segment(image, batched, batch_size=3).tobytes() == responses[index], case.name
    assert len(seen) == 3


def test_dice_equals_accuracy_kits(ref: Reference, cache: VolumeCache) -> None:
    import csv

    responses = ref.responses()
    scores = []
    for index, case in enumerate(case_files(ref.data)):
        label = cache.label(case)
        scores.append(case_dice(case.name, decode(responses[index], label.shape), label))
    summary = DiceSummary(tuple(scores))
    assert summary.line() == ref.accuracy_line
    rows = {r["case"]: r for r in csv.DictReader(ref.summary.open())}
    for score in scores:
        row = rows[score.case]
        assert float(row["kidney"]) == pytest.approx(score.kidney, rel=1e-15, abs=0)
        assert float(row["tumor"]) == pytest.approx(score.tumour, rel=1e-15, abs=0)
        assert float(row["composite"]) == pytest.approx(score.composite, rel=1e-15, abs=0)
    assert float(rows["mean"]["composite"]) == pytest.approx(summary.mean, rel=1e-15, abs=0)
    assert 0 < summary.kidney < 1 and 0 < summary.tumour < 1  # the random model finds some




def test_mlharness_run_equals_the_reference_end_to_end(ref: Reference, tmp_path: Path) -> None:
    """``mlharness run --mode accuracy`` on the raw cases: its log holds run.py's labels and
    accuracy_kits.py scores it as mlharness does (the line in accuracy.txt)."""
    import json

    from mlharness.cli.main import main

    out = tmp_path / "runs"
    code = main(["run", "-b", "3d-unet-99", "-m", str(ref.model), "-d", str(ref.data),
                 "--mode", "accuracy", "--cache-dir", str(tmp_path / "cache"), "--output-dir",
                 str(out), "--no-progress"])
    assert code == 1  # a random model is far below the DICE target
    [run_dir] = list((out / "3d-unet-99").iterdir())
    log = run_dir / "mlperf_log_accuracy.json"
    ours = {e["qsl_idx"]: bytes.fromhex(e["data"]) for e in json.loads(log.read_text())}
    assert ours == ref.responses()
    official = referee.kits19_run(
        "accuracy_kits.py", "--log_file", str(log), "--preprocessed_data_dir",
        str(ref.preprocessed), "--postprocessed_data_dir", str(tmp_path / "post"), "--num_proc",
        "2", cwd=tmp_path).stdout
    line = next(x for x in official.splitlines() if x.startswith("Accuracy:"))
    assert (run_dir / "accuracy.txt").read_text().strip() == line == ref.accuracy_line
