"""MLCommons' endpoints client, qwen3-vl's v6.1 reference, run unmodified (in its own Python
3.12, tests/endpoints_referee.py) against the tests' scripted chat server, beside mlharness
against another copy of that server: both send the same requests (each product's prompt, the
same picture bytes, no sampling key, 150 new tokens) and get the same accuracy; our reader
reads the client's own report as the checker's endpoints parser does.

The client loads ``Shopify/product-catalogue`` with ``datasets``, offline: the synthetic
catalogue is prepared into the ``datasets`` cache under that name first (the referee's
``cache`` command), as a download would leave it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import endpoints_referee
import synthetic_catalogue as sc
from endpoints_tree_support import official_parse
from mlharness.rules import endpoints
from qwen3vl_support import answerer, spec_for
from vlm_server import VlmServer

CONFIG = """name: "offline-qwen3-vl-tests"
version: "1.0"
type: "offline"
timeout: 600
model_params:
  name: "Qwen/Qwen3-VL-235B-A22B-Instruct"
  max_new_tokens: 150
datasets:
  - name: shopify_product_catalogue::q3vl
    type: "performance"
  - name: shopify_product_catalogue::q3vl
    type: "accuracy"
    accuracy_config:
      eval_method: "shopify_category_f1"
      ground_truth: "ground_truth_category"
      extractor: "identity_extractor"
      num_repeats: 1
settings:
  runtime:
    min_duration_ms: 1000
    n_samples_to_issue: {samples}
    scheduler_random_seed: 42
    dataloader_random_seed: 42
  load_pattern:
    type: "max_throughput"
  client:
    num_workers: 1
    worker_initialization_timeout: 120
  warmup:
    enabled: false
endpoint_config:
  endpoints:
    - "{url}"
  api_key: null
report_dir: {report}
"""


def _run_client(home: Path, url: str, samples: int) -> Path:
    """The official client's offline benchmark (performance, then accuracy); its report dir."""
    report = home / "report"
    config = home / "offline.yaml"
    config.write_text(CONFIG.format(url=url, samples=samples, report=report))
    exe = endpoints_referee.PYTHON.parent / "inference-endpoint"
    proc = subprocess.run([str(exe), "benchmark", "from-config", "-c", str(config)], cwd=home,
                          env=endpoints_referee.env(home), capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return report


@pytest.mark.slow
def test_the_official_client_and_mlharness_send_the_same_and_score_the_same(
        tmp_path: Path) -> None:
    from mlharness.runner import execute

    endpoints_referee.require()
    rows = sc.write(tmp_path / "catalogue")
    home = tmp_path / "client"
    home.mkdir()
    endpoints_referee.prepared(tmp_path / "catalogue", home)
    with VlmServer(answerer(rows)) as theirs_server:
        report = _run_client(home, theirs_server.url, len(rows))
    with VlmServer(answerer(rows)) as ours_server:
        record = execute(spec_for(tmp_path / "catalogue", tmp_path / "runs", ours_server.url,
                                  "Offline", "accuracy"))
    assert record.status == "ok", record.error_message
    theirs: dict[int, list[dict]] = {}
    for body in theirs_server.seen:  # performance phase first, then accuracy
        theirs.setdefault(sc.sample_of(body["messages"]), []).append(body)
    ours = {sc.sample_of(b["messages"]): b for b in ours_server.seen}
    assert set(theirs) == set(ours) == set(range(len(rows)))
    sampling = {"temperature", "top_p", "top_k", "min_tokens", "min_p", "repetition_penalty",
                "presence_penalty", "frequency_penalty", "seed"}
    for i, body in ours.items():
        first, *later = theirs[i]
        for other in (first, *later):  # performance and accuracy phase
            assert body["messages"] == other["messages"], i  # prompt, schema, picture bytes
        images = [p["image_url"]["url"] for p in body["messages"][1]["content"]
                  if p["type"] == "image_url"]
        assert len(images) == 1 and images[0].startswith(("data:image/PNG;base64,",
                                                          "data:image/JPEG;base64,"))
        assert body["model"] == first["model"]
        assert body["max_tokens"] == first["max_completion_tokens"] == 150
        assert not sampling & set(body) and not sampling & set(first)
    # the same answers scored the same: the client's shopify_category_f1 and our F1
    results = json.loads((report / "accuracy" / "accuracy_results.json").read_text())
    (entry,) = results["accuracy_scores"]
    assert entry["total_samples"] == len(rows)
    assert record.accuracy is not None
    assert record.accuracy.value == pytest.approx(entry["score"], abs=1e-12)
    # the client's own report in the result index: runs lists it, as the checker reads it
    from mlharness.store import open_store

    with open_store(home) as store:
        rows = {r.mode: r for r in store.query(under="report")}
    assert rows["performance"].benchmark == "qwen3-vl-235b-a22b" and rows["performance"].value
    assert rows["performance"].scenario == "Offline" and rows["performance"].valid is None
    assert rows["accuracy"].accuracy == pytest.approx(entry["score"], abs=1e-12)
    assert rows["accuracy"].accuracy_passed is False  # the scripted answers miss the target
    # the client's own report read by our reader as the checker's parser reads it
    official = official_parse(report)
    for kind in ("performance", "accuracy"):
        log = endpoints.read(report, kind)
        values = dict(log.values)
        if kind == "accuracy":
            values["accuracy_score"] = log.scores[0]
        assert values == official[kind], kind
