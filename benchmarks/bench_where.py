"""occurrences(store, document): every place one document is trained, at growing sample counts.

A store of 10,000 documents (lognormal lengths, mean 500 tokens) is cut into GPT samples of 128 tokens,
as many epochs as the sample count needs, and blended 50/50 with a second GPT dataset over the same
store (another seed). For each sample count the rows give: building the inverse (the first call: the
document index sorted, the shuffle inverted, each child's positions in the blend; O(samples) memory,
its size reported), one document's places once it is built (the median of 100 random documents), and
10^4 documents one after the other. The issue's goal is for a planned run of 10^9 samples; this
machine does not hold one, so the rows say the sample count they measured and the scaling is read
across them: never extrapolated into a goal row. That store is small, so a document is read in
thousands of epochs and its places grow with the sample count; the "corpus" rows build the GPT
indices alone (``build_indices`` over synthetic lengths, no store) for a corpus that grows with the
run (about 1.3 epochs, documents of mean 1,000 tokens), as a planned run of 10^12 tokens would be.

    python benchmarks/bench_where.py                    # 10^6 and 10^7 samples (a minute or two)
    python benchmarks/bench_where.py --quick            # 10^5 and 10^6 samples (seconds)
    python benchmarks/bench_where.py --samples 1e8      # the sample counts to measure
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
import warnings

import numpy as np

import tokenport as tp
from _harness import Row, lognormal_lengths, print_goals, print_table, scratch_directory
from tokenport.samples.gpt import build_indices
from tokenport.samples.inverse import GPTInverse

DOCUMENTS = 10_000
SEQ_LENGTH = 128


def write_store(prefix: str) -> tp.IndexedDataset:
    """10,000 documents of random tokens (lognormal lengths, mean 500), byte tokenizer."""
    rng = np.random.default_rng(0)
    lengths = lognormal_lengths(rng, DOCUMENTS, 500, 0.8)
    tokens = rng.integers(0, 256, int(lengths.sum())).astype(np.uint16)
    with tp.IndexedDatasetWriter(prefix, dtype=np.uint16, tokenizer=tp.load_tokenizer("byte")) as writer:
        writer.add_documents(tokens, lengths)
    return tp.IndexedDataset(prefix)


def inverse_bytes(blend: tp.BlendedDataset) -> int:
    """Bytes the inverses hold: the blend's and each GPT child's arrays."""
    parts = [blend._inverse] + [child._inverse for child in blend.datasets]
    return sum(value.nbytes for part in parts for value in vars(part).values() if isinstance(value, np.ndarray))


def measure(store: tp.IndexedDataset, samples: int) -> list[Row]:
    """The rows of one sample count."""
    config = tp.GPTSampleConfig(SEQ_LENGTH)
    half = samples // 2 + 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the children are read for many epochs: that is the point here
        children = [tp.GPTDataset(store, np.arange(DOCUMENTS), half, config, seed=s) for s in (1, 2)]
        blend = tp.BlendedDataset(children, [0.5, 0.5], samples)
    prefix = str(store.prefix)
    rng = np.random.default_rng(1)
    start = time.perf_counter()
    found = blend.occurrences(prefix, 0)
    build = time.perf_counter() - start
    one = []
    for document in rng.integers(0, DOCUMENTS, 100).tolist():
        start = time.perf_counter()
        blend.occurrences(prefix, document)
        one.append(time.perf_counter() - start)
    start = time.perf_counter()
    places = sum(len(blend.occurrences(prefix, d)) for d in rng.integers(0, DOCUMENTS, 10_000).tolist())
    many = time.perf_counter() - start
    case = f"10^{round(math.log10(samples))} samples"
    print(f"{case}: {len(found)} places of document 0; {places:,} places of 10^4 documents")
    note = " (goal is for 10^9)"
    return [
        Row("where", f"inverse build, {case}", "s", build, math.nan, "-", absolute=True),
        Row("where", f"inverse memory, {case}", "MB", inverse_bytes(blend) / 1e6, math.nan, "-", absolute=True),
        Row(
            "where",
            f"one document, {case}{note}",
            "s",
            statistics.median(one),
            math.nan,
            "-",
            goal=1.0,
            goal_text="<1 s",
            lower_is_better=True,
            absolute=True,
        ),  # fmt: skip
        Row(
            "where",
            f"10^4 documents, {case}{note}",
            "s",
            many,
            math.nan,
            "-",
            goal=10.0,
            goal_text="<10 s",
            lower_is_better=True,
            absolute=True,
        ),  # fmt: skip
    ]


def measure_corpus(samples: int) -> list[Row]:
    """The rows of one sample count over a corpus that grows with it (GPT indices only, about 1.3 epochs)."""
    rng = np.random.default_rng(2)
    documents = max(1000, int(samples * SEQ_LENGTH / 1000 / 1.3))
    lengths = lognormal_lengths(rng, documents, 1000, 0.8).astype(np.int32)
    document_index, sample_index, shuffle_index = build_indices(lengths, samples, SEQ_LENGTH, 3)
    start = time.perf_counter()
    inverse = GPTInverse(document_index, sample_index, shuffle_index, lengths, 1, "corpus")
    build = time.perf_counter() - start
    times, places = [], 0
    for document in rng.integers(0, documents, 10_000).tolist():
        start = time.perf_counter()
        places += len(inverse.occurrences(document))
        times.append(time.perf_counter() - start)
    case = f"corpus, 10^{round(math.log10(samples))} samples"
    memory = sum(value.nbytes for value in vars(inverse).values() if isinstance(value, np.ndarray))
    print(f"{case}: {documents:,} documents, {places:,} places of 10^4 documents")
    note = " (goal is for 10^9)"
    return [
        Row("where", f"inverse build, {case}", "s", build, math.nan, "-", absolute=True),
        Row("where", f"inverse memory, {case}", "MB", memory / 1e6, math.nan, "-", absolute=True),
        Row(
            "where",
            f"one document, {case}{note}",
            "s",
            statistics.median(times),
            math.nan,
            "-",
            goal=1.0,
            goal_text="<1 s",
            lower_is_better=True,
            absolute=True,
        ),  # fmt: skip
        Row(
            "where",
            f"10^4 documents, {case}{note}",
            "s",
            sum(times),
            math.nan,
            "-",
            goal=10.0,
            goal_text="<10 s",
            lower_is_better=True,
            absolute=True,
        ),  # fmt: skip
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10^5 and 10^6 samples")
    parser.add_argument("--samples", type=float, nargs="+", default=None, help="sample counts (e.g. 1e6 1e7)")
    parser.add_argument("--directory", default=None, help="scratch directory (default: a temporary one)")
    args = parser.parse_args()
    counts = [int(n) for n in (args.samples or ([1e5, 1e6] if args.quick else [1e6, 1e7]))]
    with scratch_directory(args.directory, "bench_where_", args.quick) as directory:
        store = write_store(os.path.join(directory, "store"))
        rows = [row for samples in counts for row in measure(store, samples)]
    rows += [row for samples in counts for row in measure_corpus(samples)]
    print_table(rows)
    print_goals(rows)


if __name__ == "__main__":
    main()
