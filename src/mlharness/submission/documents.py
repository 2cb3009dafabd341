"""The small documents a submission carries beside the logs: measurements.json, README.md, src/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlharness import __version__
from mlharness.loadgen.installed import embedded_conf
from mlharness.names import Precision
from mlharness.store.row import reproduce_command
from mlharness.submission.runs import Run


def run_command(run: Run) -> str:
    """The ``mlharness run`` command line that reproduces ``run`` (from its recorded spec)."""
    spec = run.spec.to_dict()
    spec["benchmark"] = spec.get("benchmark") or run.benchmark
    return reproduce_command(spec)


def measurements(run: Run, accuracy: Run | None) -> dict[str, Any]:
    """``measurements.json``: the fields the checker requires (``SYSTEM_IMP_REQUIRED_FILES``)
    as non-empty strings, plus what produced the result."""
    spec = run.spec.to_dict()
    precision = str(run.spec.precision)
    model = spec.get("model") or (run.record.backend or {}).get("model") or "unknown"
    return {
        "input_data_types": precision,
        "retraining": "No",
        "starting_weights_filename": Path(str(model)).name or "unknown",
        "weight_data_types": precision,
        "weight_transformations": weight_transformations(precision, run.record.backend or {}),
        "harness": f"mlharness {__version__}",
        "backend": str(spec.get("backend") or ""),
        "performance_run": run.path.name,
        "accuracy_run": accuracy.path.name if accuracy else "",
    }


def mlperf_conf(rules: Any, loadgen_model: str) -> str:
    """The older layout's ``measurements/.../mlperf.conf``: the lines in effect for
    ``loadgen_model`` — the mlperf.conf compiled into the installed LoadGen, with the seeds
    ``--round`` set from code (``rules.seeds``)."""
    lines = [f"# mlperf.conf in effect for {loadgen_model} under --round {rules.round}, written by "
             f"mlharness {__version__}:",
             "# the installed LoadGen's compiled-in mlperf.conf, its seeds replaced by the round's",
             "# (set on TestSettings from code); user.conf beside this file holds the run's own."]
    for key, value in embedded_conf().items():
        model, _, setting = key.split(".", 2)
        if model not in ("*", loadgen_model) or "test05" in setting:
            continue
        if setting in rules.seeds:
            value = str(rules.seeds[setting])
        lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


def weight_transformations(precision: str, backend: dict[str, Any]) -> str:
    """What was done to the weights, naming the calibration of a calibrated int8 model (the
    record ``mlharness calibrate`` left beside it, as the run found it)."""
    if precision == Precision.FP32:
        return "No"
    cal = backend.get("calibration")
    if not isinstance(cal, dict):
        return f"post-training {precision} conversion"
    samples = cal.get("samples") or {}
    where = samples.get("list", "unknown list")
    if samples.get("official"):
        where = f"official calibration list {samples.get('option', '')} ({where})"
    count = len(cal.get("qsl_indices") or [])
    return (f"post-training {precision} quantisation (mlharness calibrate, {cal.get('recipe', 'QDQ')}, "
            f"{cal.get('method', 'minmax')} activation ranges over {count} samples of the {where})")


def _versions(run: Run) -> str:
    versions = run.record.versions or {}
    return ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) or "unknown"


def result_readme(bench_dir: str, run: Run, accuracy: Run | None, tests: list[str]) -> str:
    """README.md next to measurements.json: how this result was produced and reproduced."""
    lines = [
        f"# {bench_dir} {run.scenario}",
        "",
        f"Produced by mlharness {__version__} on the official LoadGen ({_versions(run)}).",
        "",
        "## Reproduce",
        "",
        "```",
        run_command(run),
    ]
    if accuracy is not None:
        lines.append(run_command(accuracy))
    lines += ["```", ""]
    if run.short:
        lines += ["**Test-length run (`--test`): not valid for submission (under 600 s).**", ""]
    lines += [f"- performance run: `{run.path.name}` (status {run.record.status})"]
    if accuracy is not None:
        acc = accuracy.record.accuracy
        lines.append(f"- accuracy run: `{accuracy.path.name}`: {acc.text if acc else 'n/a'}")
    for test in tests:
        lines.append(f"- compliance {test}: see `{test}/verify_*.txt`")
    return "\n".join(lines) + "\n"


def src_readme(entries: list[dict[str, Any]]) -> str:
    lines = [
        "# Source: what produced these results",
        "",
        f"mlharness {__version__} (the mlharness repository at that version),",
        "a Python harness on the official MLPerf LoadGen (`mlcommons-loadgen` from PyPI).",
        "Per benchmark, `settings.json` holds the run specification, backend and model",
        "settings, LoadGen test configuration and package versions of every laid-out run.",
        "",
        "| benchmark | scenario | mode | backend | model |",
        "|---|---|---|---|---|",
    ]
    for e in entries:
        lines.append(f"| {e['benchmark']} | {e['scenario']} | {e['mode']} | {e['backend']} | "
                     f"{e['model']} |")
    return "\n".join(lines) + "\n"


def src_settings(runs: list[Run]) -> str:
    """``src/<benchmark>/settings.json``: spec, backend, test_config, versions per run."""
    data = []
    for run in runs:
        data.append({
            "run": run.path.name,
            "spec": run.spec.to_dict(),
            "settings": run.record.settings.model_dump(),
            "backend": run.record.backend,
            "task": run.record.task,
            "test_config": run.record.test_config,
            "versions": run.record.versions,
        })
    return json.dumps(data, indent=2, default=str) + "\n"
