"""`mlharness compare`: the seed-000 table from runs, run groups, submission trees and a CSV in
MLCommons' published results layout; INVALID and accuracy misses marked, never compared."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mlharness.report.table import Column, Entry, compare, delta_text
from store_support import demo_runs, mlharness

#: header of a published summary CSV (mlcommons/inference_results_v4.1,
#: closed/GigaComputing/summary.csv)
PUBLISHED_HEADER = ("Organization,Availability,Division,SystemType,SystemName,Platform,Model,"
                    "MlperfModel,Scenario,Result,Accuracy,number_of_nodes,"
                    "host_processor_model_name,host_processors_per_node,"
                    "host_processor_core_count,accelerator_model_name,accelerators_per_node,"
                    "Location,framework,operating_system,notes,compliance,errors,version,"
                    "inferred,has_power,Units")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_runs(tmp_path_factory)


def test_by_batch_size_prints_seed_table_with_deltas(runs: Path) -> None:
    proc = mlharness("compare", "--by", "batch_size", "--runs-dir", str(runs))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("batch_size | demo Single Stream (Latency (ms)) | "
                               "demo Offline (Samples/s)")
    assert lines[1] == "-|-|-"
    rows = {line.split(" | ")[0]: line.split(" | ") for line in lines[2:] if " | " in line}
    assert set(rows) >= {"batch_size=1", "batch_size=8", "batch_size=32", "Delta batch_size=32"}
    delta = rows["Delta batch_size=32"][2]
    assert delta.endswith(("% better", "% worse")) or delta == "0%"
    # the sign is the change; the word follows the direction (throughput: higher is better)
    data = json.loads(mlharness("compare", "--by", "batch_size", "--runs-dir", str(runs),
                                "--format", "json").stdout)
    v8 = data["cells"]["batch_size=8"]["demo/Offline"]["value"]
    v32 = data["cells"]["batch_size=32"]["demo/Offline"]["value"]
    d = data["deltas"][-1]["values"]["demo/Offline"]
    assert d["percent"] == pytest.approx((v32 - v8) / v8 * 100)
    assert d["better"] is (v32 > v8)
    assert data["cells"]["batch_size=8"]["demo/Offline"]["accuracy_ok"] is True  # its acc run


def test_a_reader_that_goes_away_ends_it_quietly(runs: Path) -> None:
    """`mlharness compare | head`: no BrokenPipeError traceback, 128 + SIGPIPE."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line is written
    try:
        proc = subprocess.run([sys.executable, "-m", "mlharness.cli.main", "compare", "--by",
                               "batch_size", "--runs-dir", str(runs)], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write)
    assert proc.returncode == 141 and proc.stderr == "", proc.stderr


def test_csv_format_and_two_run_directories(runs: Path) -> None:
    perf = sorted(p for p in (runs / "demo").iterdir() if p.name.startswith("Offline-perf"))
    proc = mlharness("compare", str(perf[0]), str(perf[1]), "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    table = list(csv.reader(io.StringIO(proc.stdout)))
    assert table[0] == ["group", "demo Offline (Samples/s)"]
    assert [r[0] for r in table[1:]] == [perf[0].name, perf[1].name, "Delta"]
    # batch 8 against batch 32 without --by: not one setting apart by design, so not compared
    assert table[3][1].startswith("n/c (settings differ: spec.batch_size "), table[3][1]


def test_without_by_only_runs_of_the_same_settings_are_compared(runs: Path,
                                                                 tmp_path: Path) -> None:
    copy = tmp_path / "runs"
    shutil.copytree(runs, copy, ignore=shutil.ignore_patterns("mlharness.sqlite*",
                                                              "mlperf_log_trace.json"))
    perf = {json.loads((p / "run.json").read_text())["spec"]["batch_size"]: p
            for p in (copy / "demo").iterdir() if p.name.startswith("Offline-perf")}
    # the batch-8 run repeated later with the same settings, 10% faster
    repeat = copy / "demo" / "Offline-performance-29990101-000000"
    shutil.copytree(perf[8], repeat)
    data = json.loads((repeat / "run.json").read_text())
    data["result"]["value"] *= 1.1
    data["started"] = "2999-01-01T00:00:00+00:00"
    (repeat / "run.json").write_text(json.dumps(data))
    proc = mlharness("compare", str(copy / "demo"), "--scenario", "Offline")
    assert proc.returncode == 0, proc.stderr
    rows = {line.split(" | ")[0]: line.split(" | ") for line in proc.stdout.splitlines()
            if " | " in line}
    name = {k: f"demo/{p.name}" for k, p in perf.items()}  # rows are named after run paths
    assert rows[f"Delta demo/{repeat.name}"][1] == f"+10.00% better vs {name[8]}"
    first, second = sorted((name[8], name[32]), key=list(rows).index)
    differ = rows[f"Delta {second}"][1]
    assert differ.startswith("n/c (settings differ: spec.batch_size "), differ
    assert "compared only with the first earlier run of the same settings" in proc.stdout
    # with --by the rows are one setting apart by design: compared as before
    by = mlharness("compare", str(copy / "demo"), "--by", "batch_size").stdout
    assert "settings differ" not in by and " vs " not in by


def test_invalid_and_accuracy_miss_are_marked_never_compared(runs: Path, tmp_path: Path) -> None:
    copy = tmp_path / "runs"
    shutil.copytree(runs, copy, ignore=shutil.ignore_patterns("mlharness.sqlite*",
                                                              "mlperf_log_trace.json"))
    def run_of(prefix: str, batch: int) -> Path:
        return next(p for p in (copy / "demo").iterdir() if p.name.startswith(prefix)
                    and json.loads((p / "run.json").read_text())["spec"]["batch_size"] == batch)

    # one run as LoadGen would report it INVALID, one accuracy run below target
    perf32 = run_of("Offline-perf", 32)
    data = json.loads((perf32 / "run.json").read_text())
    data["result"]["valid"] = False
    data["result"]["reasons"] = ["min duration not met"]
    (perf32 / "run.json").write_text(json.dumps(data))
    acc = run_of("Offline-acc", 8)
    data = json.loads((acc / "run.json").read_text())
    data["accuracy"]["value"], data["accuracy"]["passed"] = 50.0, False
    (acc / "run.json").write_text(json.dumps(data))
    out = mlharness("compare", "--by", "batch_size", "--runs-dir", str(copy)).stdout
    rows = {line.split(" | ")[0]: line.split(" | ") for line in out.splitlines() if " | " in line}
    assert "ACCURACY MISS" in rows["batch_size=8"][2]
    assert "INVALID" in rows["batch_size=32"][2]
    assert rows["Delta batch_size=32"][2].startswith("n/c (")
    assert "min duration not met" in out  # the note says why


def test_direction_of_better() -> None:
    entries = [Entry("v2.1", "resnet50", "SingleStream", 0.62, True, "a"),
               Entry("v3.0", "resnet50", "SingleStream", 0.54, True, "b"),
               Entry("v2.1", "resnet50", "Offline", 77652.40, True, "a"),
               Entry("v3.0", "resnet50", "Offline", 79205.10, True, "b"),
               Entry("v2.1", "retinanet", "Offline", 660.94, True, "a"),
               Entry("v3.0", "retinanet", "Offline", 1102.85, False, "b")]
    table = compare(entries, by="round")
    deltas = table.deltas[0][2]
    assert delta_text(deltas["resnet50/SingleStream"]) == "-12.90% better"  # seed 000: -12.9%
    assert delta_text(deltas["resnet50/Offline"]) == "+2.00% better"  # seed 000: +2.0%
    assert deltas["retinanet/Offline"].percent is None and "INVALID" in deltas["retinanet/Offline"].why
    assert [c.title for c in table.columns][:2] == ["ResNet50 Single Stream (Latency (ms))",
                                                    "ResNet50 Offline (Samples/s)"]
    assert Column("x", "Server").unit == "Queries/s"


def test_published_csv_and_submission_tree(runs: Path, tmp_path: Path) -> None:
    published = tmp_path / "published.csv"
    published.write_text(PUBLISHED_HEADER + "\n" + "\n".join([
        'Acme,available,closed,"edge","Acme Box",acme_box,resnet50,resnet,Offline,1000.0,'
        '76.1,1,"CPU",1,8,"",0,closed/Acme/results/acme_box/resnet50/Offline,"ORT","Linux",'
        '"",1,0,v6.0,0,False,Samples/s',
        'Acme,available,closed,"edge","Acme Box",acme_box,resnet50,resnet,SingleStream,2.5,'
        '76.1,1,"CPU",1,8,"",0,closed/Acme/results/acme_box/resnet50/SingleStream,"ORT","Linux",'
        '"",1,0,v6.0,0,False,Latency (ms)']) + "\n")
    # a submission tree laid out as `mlharness submit` does, with real LoadGen logs
    tree = tmp_path / "submission"
    perf = sorted(p for p in (runs / "demo").iterdir() if p.name.startswith("Offline-perf"))[0]
    run_1 = tree / "open" / "Mine" / "results" / "my_box" / "resnet50" / "Offline" / \
        "performance" / "run_1"
    run_1.mkdir(parents=True)
    for name in ("mlperf_log_detail.txt", "mlperf_log_summary.txt"):
        shutil.copy(perf / name, run_1 / name)
    proc = mlharness("compare", str(published), str(tree))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == ("group | ResNet50 Single Stream (Latency (ms)) | "
                        "ResNet50 Offline (Samples/s)")
    assert lines[2].startswith("Acme Acme Box (v6.0) | 2.50 | 1,000.00")
    assert lines[3].startswith("Mine/my_box |  | ")
    mine = json.loads((perf / "run.json").read_text())["result"]["value"]
    assert lines[4].startswith("Delta |  | ") and f"{(mine - 1000) / 10:+.2f}%" in lines[4]
    assert "same settings" not in proc.stdout  # no settings recorded: compared as before


def test_nothing_to_compare_is_a_user_error(tmp_path: Path) -> None:
    proc = mlharness("compare", str(tmp_path / "nope"))
    assert proc.returncode == 2 and "not found" in proc.stderr


def test_a_benchmark_folder_uses_the_runs_folder_index(runs: Path, tmp_path: Path) -> None:
    copy = tmp_path / "runs"
    shutil.copytree(runs, copy, ignore=shutil.ignore_patterns("mlharness.sqlite*",
                                                              "mlperf_log_trace.json"))
    proc = mlharness("compare", str(copy / "demo"), "--by", "batch_size", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert set(json.loads(proc.stdout)["groups"]) == {"batch_size=1", "batch_size=8",
                                                      "batch_size=32"}
    assert (copy / "mlharness.sqlite").is_file() and not (copy / "demo" / "mlharness.sqlite").exists()
