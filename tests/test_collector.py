"""Python's collector held back while LoadGen times a test (collector.py, loadgen/session.py)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mlharness.collector import HELD_THRESHOLDS, frozen_after, held_collector


def test_held_collector_freezes_what_is_alive_raises_thresholds_and_restores_them() -> None:
    before = gc.get_threshold()
    alive = [[i] for i in range(1000)]  # containers the collector tracks
    with held_collector():
        assert gc.get_threshold() == HELD_THRESHOLDS
        assert gc.get_freeze_count() >= len(alive)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_held_collector_restores_after_an_error() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), held_collector():
        raise RuntimeError("the test failed")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_samples_loaded_inside_the_test_are_frozen_too() -> None:
    loaded: list[list[int]] = []
    with held_collector():
        frozen = gc.get_freeze_count()
        frozen_after(lambda indices: loaded.extend([i] for i in indices))(range(500))
        assert gc.get_freeze_count() >= frozen + 500
    assert gc.get_freeze_count() == 0


def test_a_real_loadgen_test_runs_with_the_collector_held(tmp_path: Path) -> None:
    """The SUT's issue callback (LoadGen's thread) and the QSL's load see the held collector;
    after StartTest returns, the process's own thresholds are back."""
    script = textwrap.dedent("""
        import gc, json, sys
        from pathlib import Path
        from mlharness.loadgen.session import SampleLibrary, complete, run_test
        from mlharness.loadgen.settings import TestConfig, effective_settings

        out = Path(sys.argv[1])
        cfg = TestConfig(model="resnet50", scenario="Offline", target_qps=1000,
                         min_duration_ms=50, min_query_count=1, performance_sample_count=64)
        settings = effective_settings(cfg)
        (out / "user.conf").write_text(settings.render_user_conf())
        seen = {}
        samples = []

        def load(indices):
            samples.extend([i] for i in indices)
            seen["frozen_before_load"] = gc.get_freeze_count()

        def issue(ids, indices):
            seen["threshold"] = gc.get_threshold()
            seen["frozen"] = gc.get_freeze_count()
            complete(ids, [b"x"] * len(ids))

        qsl = SampleLibrary(64, 64, load, lambda indices: None)
        run_test(settings, out / "user.conf", out, qsl, issue, lambda: None)
        seen["after"] = gc.get_threshold()
        seen["frozen_after"] = gc.get_freeze_count()
        print(json.dumps(seen))
    """)
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert tuple(seen["threshold"]) == HELD_THRESHOLDS
    assert seen["frozen"] >= seen["frozen_before_load"] + 64  # the loaded samples frozen too
    assert tuple(seen["after"]) == gc.get_threshold()  # the interpreter's default, restored
    assert seen["frozen_after"] == 0
    assert "Scenario : Offline" in (tmp_path / "mlperf_log_summary.txt").read_text()
