"""What keeping identifiers costs prepare, and how fast documents are found by identifier.

prepare: the demo's prose corpus (one record per stdlib docstring, each with an "id") prepared on one
worker with id_field="id" and with id_field=None: the wall time per input document and the size of
provenance.npz per document, both ways (the best of ``--repeat`` runs each). Lookup: an identifier
column of synthetic URLs (``https://example.org/doc/K``) for 10^6 documents (10^7 without --quick):
the index built on the first lookup (hashing every identifier, a counting sort by hash), then 10^4 identifiers found
(one search, each match compared byte for byte). The baseline column is the run without identifiers
(prepare) or a Python dict built over the same identifiers (lookup).

    python benchmarks/bench_identifiers.py            # the whole prose corpus; 10^7 documents
    python benchmarks/bench_identifiers.py --quick    # 60 source files; 10^6 documents
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from _harness import Row, print_table, scratch_directory
from tokenport.corpus import PrepareConfig, prepare
from tokenport.corpus.run import identifiers
from tokenport.demo import build_demo_corpus


def prepare_rows(directory: str, limit: int | None, repeat: int) -> list[Row]:
    corpus = build_demo_corpus(os.path.join(directory, "corpus"), limit=limit)
    seconds, sizes = {}, {}
    for field in ("id", None):
        best = float("inf")
        for k in range(repeat):
            out = os.path.join(directory, f"out-{field}-{k}")
            started = time.perf_counter()
            prepare(PrepareConfig([corpus.prose_path], out, workers=1, id_field=field))
            best = min(best, time.perf_counter() - started)
        seconds[field], sizes[field] = best, os.path.getsize(os.path.join(out, "provenance.npz"))
    n = corpus.prose_documents
    per_document = {field: value / n * 1e6 for field, value in seconds.items()}
    return [
        Row(
            "prepare",
            f"{n:,} docstrings, 1 worker",
            "us/doc",
            per_document["id"],
            per_document[None],
            "no ids",
            lower_is_better=True,
        ),
        Row("prepare", "provenance.npz", "bytes/doc", sizes["id"] / n, sizes[None] / n, "no ids", lower_is_better=True),
    ]


def lookup_rows(documents: int, asked: int) -> list[Row]:
    started = time.perf_counter()
    identifiers.IdentifierIndex.build(*identifiers.pack([b"warm"]))  # the kernel loaded (compiled the first time)
    loaded = time.perf_counter() - started
    names = [f"https://example.org/doc/{k}".encode() for k in range(documents)]
    data, offsets = identifiers.pack(names)
    started = time.perf_counter()
    index = identifiers.IdentifierIndex.build(data, offsets)
    built = time.perf_counter() - started
    memory = (index.hashes.nbytes + index.starts.nbytes + index.rows.nbytes) / documents
    wanted = [names[int(k)].decode() for k in np.random.default_rng(0).choice(documents, asked, replace=False)]
    started = time.perf_counter()
    found = index.find(wanted)
    searched = time.perf_counter() - started
    assert all(len(rows) == 1 for rows in found)
    started = time.perf_counter()
    by_name = {name: k for k, name in enumerate(names)}
    dict_built = time.perf_counter() - started
    started = time.perf_counter()
    _ = [by_name[name.encode()] for name in wanted]
    dict_searched = time.perf_counter() - started
    label = f"{documents:,} documents"
    return [
        Row("lookup", "hash kernel loaded", "s", loaded, float("nan"), "-", lower_is_better=True),
        Row("lookup", f"{label}: index build", "s", built, dict_built, "dict", lower_is_better=True),
        Row("lookup", f"{label}: {asked:,} ids", "s", searched, dict_searched, "dict", lower_is_better=True),
        Row("lookup", f"{label}: index memory", "bytes/doc", memory, float("nan"), "-", lower_is_better=True),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="60 source files; 10^6 documents")
    parser.add_argument("--repeat", type=int, default=3, help="prepare runs per setting (the best is kept)")
    parser.add_argument("--directory", default=None, help="scratch directory (default: a temporary one)")
    args = parser.parse_args()
    with scratch_directory(args.directory, "bench_identifiers_", args.quick) as directory:
        rows = prepare_rows(directory, 60 if args.quick else None, args.repeat)
        rows += lookup_rows(10**6 if args.quick else 10**7, 10**4)
    print_table(rows)


if __name__ == "__main__":
    main()
