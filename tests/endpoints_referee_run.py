"""Commands the endpoints referee's Python runs (tests/endpoints_referee.py): each calls the
official code, unmodified, and writes what it produced as JSON.

    requests CACHE OUT          the endpoints client's chat request of every sample of
                                 Shopify/product-catalogue in the datasets cache CACHE (its
                                 dataset factory and preset, its adapter's request body)
    score LOG DATASET OUT       the qwen3-vl reference's evaluation.py on LoadGen's accuracy log
                                 (accuracy.txt text and the F1 it logs)
    cache DATASET NAME CACHE    the data set loaded by ``datasets`` and saved where
                                 ``load_dataset(NAME)`` finds it offline (its cache), so the
                                 endpoints client loads NAME from there

Several commands in one process (the Python and ``datasets`` imported once): separated by
``+``, run in order, e.g. ``cache D N C + requests C OUT + score LOG D OUT``. The process ends
with ``os._exit`` once every command has written its output: ``datasets``' threads can abort
the interpreter's teardown ("terminate called without an active exception") after the work is
done.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace


def requests(cache_dir: str, out: str) -> None:
    """The client's own path from data set to request body: its dataset factory (the
    ``shopify_product_catalogue::q3vl`` preset, loaded from ``load_dataset`` offline and from
    the parquet it then caches), the OpenAI adapter's transforms and its request encoder."""
    from inference_endpoint.config.schema import APIType, Dataset, ModelParams
    from inference_endpoint.core.types import Query
    from inference_endpoint.dataset_manager.factory import DataLoaderFactory
    from inference_endpoint.openai.openai_msgspec_adapter import OpenAIMsgspecAdapter

    os.environ["HF_DATASETS_CACHE"] = cache_dir
    params = ModelParams(name="Qwen/Qwen3-VL-235B-A22B-Instruct", max_new_tokens=150)
    bodies = []
    for _ in range(2):  # first from load_dataset, then from the client's parquet cache
        loader = DataLoaderFactory.create_loader(Dataset(name="shopify_product_catalogue::q3vl"))
        loader.load(api_type=APIType.OPENAI, model_params=params)
        bodies.append([json.loads(OpenAIMsgspecAdapter.encode_query(
            Query(data=loader.load_sample(i)))) for i in range(loader.num_samples())])
    assert bodies[0] == bodies[1], "the client's two loads differ"
    Path(out).write_text(json.dumps(bodies[0]))


def score(log: str, dataset: str, out: str) -> None:
    from mlperf_inf_mm_q3vl.evaluation import run_evaluation

    run_evaluation(random_seed=12345, filename=Path(log),
                   dataset=SimpleNamespace(repo_id=dataset, token=None, split=["train", "test"]))
    Path(out).write_text(json.dumps({"accuracy_txt": Path("accuracy.txt").read_text()}))


def cache(dataset: str, name: str, cache_dir: str) -> None:
    """``datasets`` prepares the local folder under the Hub name's last part, and the folder is
    then named as a Hub download's (``<org>___<name>``): offline, ``load_dataset(name)`` finds
    it there (``CachedDatasetModuleFactory``)."""
    import shutil

    import datasets.load as load

    org, short = name.split("/")
    factory = load.dataset_module_factory

    def named(*args, **kwargs):  # type: ignore[no-untyped-def]
        module = factory(*args, **kwargs)
        module.builder_kwargs["dataset_name"] = short
        return module

    load.dataset_module_factory = named
    builder = load.load_dataset_builder(dataset, cache_dir=cache_dir)
    builder.download_and_prepare()
    root = Path(cache_dir)
    shutil.move(root / short.replace("-", "_"), root / f"{org}___{short}") if (
        root / short.replace("-", "_")).exists() else shutil.move(root / short,
                                                                  root / f"{org}___{short}")
    print(root / f"{org}___{short}")


def main(argv: list[str]) -> None:
    commands = {"requests": requests, "score": score, "cache": cache}
    words: list[str] = []
    for word in [*argv, "+"]:
        if word != "+":
            words.append(word)
            continue
        command, *args = words
        commands[command](*args)
        words = []


if __name__ == "__main__":
    main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
