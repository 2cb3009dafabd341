"""qwen3-vl-235b-a22b: a vision-language model classifying products of the Shopify catalogue
(a picture and a text each) into a category path, served by an OpenAI-compatible server.

Each sample is one chat request built as the v6.1 reference client (MLCommons' endpoints) builds
it (:mod:`mlharness.llm.product_request`): the system prompt with the answer's JSON schema, the
product's text, its picture as a base64 ``image_url`` part, 150 new tokens and no sampling key.
The answer's text (what the server streamed) is the LoadGen response, UTF-8, as the LoadGen
reference logged it; ``n_tokens`` is its token count. Accuracy is the category hierarchical F1 of
the official ``evaluation.py`` (:mod:`mlharness.llm.hierarchical_f1`).

``--dataset`` is the catalogue folder in its Hugging Face layout (``mlharness get
shopify-product-catalogue --from DIR``): ``Shopify/product-catalogue`` (train + test, 48,289
samples) for Offline and Server, ``nvidia/Shopify-product-catalogue-8k`` (8,000) for
Interactive, whose accuracy target is its own; the set is told by its size.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

from mlharness.errors import DatasetError
from mlharness.files import cache_root
from mlharness.llm import hierarchical_f1, image_cache, product_request
from mlharness.llm.product_catalogue import Catalogue
from mlharness.options import Options
from mlharness.prompts import GenerationRequest
from mlharness.rules import BenchmarkRules
from mlharness.tasks.base import AccuracyResult, GenerationTask, Progress, TaskOptions

METRIC = "F1_HIERARCHICAL"
#: pictures read from the catalogue's files at a time while samples load
CHUNK = 256


class Qwen3VlOptions(Options):
    """``--task-option`` keys of qwen3-vl-235b-a22b."""

    #: fewer new tokens than the reference's 150 (quick trials; the result says so)
    max_new_tokens: int | None = None
    #: threads re-encoding the pictures into the cache (default: the CPUs)
    image_threads: int | None = None


class Qwen3VlTask(GenerationTask):
    """The benchmark's data set, requests, answers and accuracy."""

    response_dtype = "uint8"  # the answer's UTF-8 text
    rules: BenchmarkRules  # always given (its generation, bounds and targets come from them)

    def __init__(self, name: str, options: TaskOptions) -> None:
        self.generation = self.take_rules(name, options)
        parsed = options.parsed(Qwen3VlOptions)
        self.max_new_tokens = parsed.max_new_tokens or self.generation.max_new_tokens
        self.threads = parsed.image_threads or os.cpu_count() or 1
        if options.dataset is None:
            raise DatasetError(f"{name} needs the Shopify product catalogue",
                               "give --dataset DIR: the Hugging Face data set's folder "
                               "(Shopify/product-catalogue; its 8k subset for Interactive), "
                               "see docs/qwen3-vl.md")
        self.catalogue = Catalogue(Path(options.dataset))
        if not len(self.catalogue):
            raise DatasetError(f"{options.dataset} holds no samples", "is it the right folder?")
        count = len(self.catalogue)
        self.count = min(count, options.max_samples) if options.max_samples else count
        #: the scenario whose set this is: the 8k set is Interactive's (its own target)
        self.set_of = next((s for s, n in self.rules.accuracy_sample_count_by_scenario.items()
                            if n == count and n != self.rules.dataset_size), "Offline")
        self._urls: dict[int, str] = {}
        self._cache = image_cache.cache_path(self.catalogue, self.count,
                                             cache_root(options.cache_dir))
        self._cache_urls: Any = None

    # ---- what LoadGen and the SUT ask ---------------------------------------------------------

    def prepare(self, progress: Progress | None = None) -> None:
        """The pictures as the reference sends them, cached on disk once (``image_cache``):
        minutes for the whole catalogue the first time, nothing after."""
        image_cache.build(self.catalogue, self.count, self._cache, self.threads, progress)

    def _cached(self) -> Any:
        """The cache's pictures (None before ``prepare`` made it: encoded as they load)."""
        if self._cache_urls is None and self._cache.is_file():
            self._cache_urls = image_cache.open_urls(self._cache)
        return self._cache_urls

    def _url(self, index: int) -> str:
        image, fmt = product_request.reference_image(self.catalogue.image(index))
        return product_request.image_url(image, fmt)

    def load_samples(self, indices: Sequence[int]) -> None:
        """Each picture as the reference sends it (decoded, saved again, base64): from the
        cache ``prepare`` made, else a chunk of files at a time on ``image_threads`` threads
        (Pillow codes outside the GIL)."""
        wanted = [i for i in sorted(set(indices)) if i not in self._urls]
        cached = self._cached()
        if cached is not None:
            self._urls.update((i, cached[i].as_py()) for i in wanted)
            return
        with ThreadPoolExecutor(max_workers=max(1, min(self.threads, len(wanted) or 1))) as pool:
            for at in range(0, len(wanted), CHUNK):
                images = self.catalogue.images(wanted[at:at + CHUNK])

                def encode(index: int, images: dict[int, bytes] = images) -> tuple[int, str]:
                    image, fmt = product_request.reference_image(images[index])
                    return index, product_request.image_url(image, fmt)

                self._urls.update(pool.map(encode, images))
        self.catalogue.release()

    def unload_samples(self, indices: Sequence[int]) -> None:
        for index in indices:
            self._urls.pop(index, None)

    def request(self, index: int) -> GenerationRequest:
        """Sample ``index`` as the reference's chat request (a sample not loaded yet, as the
        warm-up's, is encoded now)."""
        url = self._urls.get(index)
        if url is None:
            cached = self._cached()
            url = cached[index].as_py() if cached is not None else self._url(index)
        g = self.generation
        return GenerationRequest(input_ids=None, text=None, max_new_tokens=self.max_new_tokens,
                                 messages=product_request.messages(
                                     self.catalogue.products[index], url),
                                 server_sampling=g.server_sampling, temperature=g.temperature,
                                 top_p=g.top_p, top_k=g.top_k)

    def encode_output(self, index: int, ids: Sequence[int]) -> bytes:
        """The answer's text as UTF-8 (what the server streamed, carried with the ids); empty
        from a backend that gives no text, which then scores as unparsable."""
        text = getattr(ids, "text", None)
        return text.encode("utf-8") if isinstance(text, str) else b""

    # ---- accuracy -----------------------------------------------------------------------------

    def score(self, entries: list[tuple[int, bytes]]) -> AccuracyResult:
        """evaluation.py's category hierarchical F1 of the logged answers (a fraction)."""
        if not entries:
            raise DatasetError("the accuracy log has no entries", "re-run the accuracy test")
        for index, _ in entries:
            if not 0 <= index < len(self.catalogue):
                raise DatasetError(f"accuracy log sample {index} is outside the catalogue "
                                   f"({len(self.catalogue)} samples)", "is this the right --dataset?")
        found = hierarchical_f1.score(entries, self.catalogue.products)
        bound = self.rules.accuracy_for(self.set_of)[0]
        failures = []
        expected = self.rules.accuracy_count_for(self.set_of)
        if self.count < expected:
            failures.append(f"{self.count} of the {expected} samples scored")
        if self.max_new_tokens != self.generation.max_new_tokens:
            failures.append(f"{self.max_new_tokens} new tokens, not the reference's "
                            f"{self.generation.max_new_tokens}")
        return AccuracyResult(metric=METRIC, value=found.f1, text=found.accuracy_text(),
                              target=bound.value, failures=failures,
                              details={**found.details(), "metrics": {METRIC: found.f1},
                                       "set": self.set_of})

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "dataset": str(self.catalogue.root),
                "layout": self.catalogue.layout.kind, "splits": self.catalogue.splits,
                "samples": self.count, "set": self.set_of, "max_new_tokens": self.max_new_tokens}


def create(name: str, options: TaskOptions) -> Qwen3VlTask:
    return Qwen3VlTask(name, options)
