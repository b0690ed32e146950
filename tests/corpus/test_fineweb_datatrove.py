"""A FineWeb-style pipeline in compat mode keeps the documents datatrove keeps, with the same text.

The pipeline and corpus are tests/_support/fineweb.py's (language, Gopher repetition and quality,
C4, FineWeb quality, MinHash dedup, PII), on ~200 kB of pages from the standard library's
docstrings: datatrove's stages (reader, filters, writer, MinHash signatures, buckets, cluster and
filter, PII formatter, writer) against ``prepare`` with the same steps, ``compat: datatrove``.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tests._support import fineweb
from tokenport.corpus import PrepareConfig, prepare
from tokenport.demo.corpus import docstrings, read_source, stdlib_sources
from tokenport.indexed import IndexedDataset

pytest.importorskip("spacy")
pytest.importorskip("datatrove.pipeline.dedup.minhash")
pytest.importorskip("faker")
pytest.importorskip("pycld2")


def tokenport_kept(paths: list[str], output: str) -> tuple[list[str], list[str], dict]:
    """(ids, texts) of the documents ``prepare`` kept (byte tokenizer), and its step counts."""
    result = prepare(
        PrepareConfig(
            inputs=paths,
            output=output,
            workers=1,
            tokenizer="byte",
            steps=fineweb.tokenport_steps(),
            keep_rejected=True,
        )
    )
    texts = []
    for prefix in result.parts:
        with IndexedDataset(prefix) as dataset:
            texts += [bytes(np.asarray(dataset[d][:-1], dtype=np.uint8)).decode("utf-8") for d in range(len(dataset))]
    rejected = set()
    for name in os.listdir(os.path.join(output, "rejected")):
        with open(os.path.join(output, "rejected", name), encoding="utf-8") as f:
            rejected |= {json.loads(line)["id"] for line in f}
    ids = []
    for path in paths:  # a document's id is PATH:LINE (from 1); the page's own id is in the record
        with open(path, encoding="utf-8") as f:
            ids += [json.loads(line)["id"] for n, line in enumerate(f, 1) if f"{path}:{n}" not in rejected]
    return ids, texts, result.steps


def test_fineweb_pipeline_keeps_what_datatrove_keeps(tmp_path):
    from loguru import logger

    logger.disable("datatrove")
    sources = [s for s in (read_source(path) for path in stdlib_sources()[:80]) if s]
    lines = fineweb.distinct_lines([d for source in sources for d in docstrings(source)])
    inputs = tmp_path / "in"
    inputs.mkdir()
    paths, kinds = fineweb.fineweb_corpus(str(inputs), lines, sources, 200_000, seed=3)
    assert kinds["exact copy"] and kinds["near copy"] and kinds["non-English"] and kinds["prose with PII"]

    out = fineweb.run_datatrove(str(inputs), str(tmp_path / "datatrove"), workers=1)
    theirs = fineweb.datatrove_documents(out)
    ids, texts, steps = tokenport_kept(paths, str(tmp_path / "tokenport"))

    assert ids == [i for i, _ in theirs]
    assert texts == [text for _, text in theirs]
    # every step had work to do, so the equality says something about each
    assert steps["0:language"]["removed:other_language"] >= kinds["non-English"] // 2
    assert all(
        steps[f"{k}"].get("documents_out", 0) < steps[f"{k}"]["documents_in"]
        for k in ("1:gopher_repetition", "2:gopher_quality", "3:c4")
    )
    assert steps["5:minhash_dedup"]["removed:duplicate"] > 0
    assert steps["6:pii"]["replaced:email"] > 0 and steps["6:pii"]["replaced:ipv4"] > 0
