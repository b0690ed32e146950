"""occurrences(store, document): every place one document is trained, at growing sample counts.

"corpus" rows (the issue's goal shape): GPT indices for a corpus that grows with the run (about 1.3
epochs of documents of mean 1,000 tokens, samples of 1,024 tokens, as a planned run of 10^12 tokens
in 10^9 samples would be) are built (``build_indices``), written to .npy files and memory-mapped, as
the index cache holds them. The occurrences lookups (``gpt_inverse_arrays``: positions sorted by
document, the shuffle inverted) are built once (time and bytes reported), written beside them and
memory-mapped; then one document's places (median of 100 random documents) and 10^4 documents one
after the other are timed, and the process's anonymous-memory growth over those queries (RssAnon) and
its peak RSS growth (VmHWM reset through /proc/self/clear_refs: the mapped file pages the queries
touched, and those the kernel maps around them, included). Last, the time the receipt check of
``tokenport.occurrences(state, dataset=...)`` spends hashing these indices (``samples.base.digest``).

"store" rows: ``tokenport.occurrences`` end to end (loader state, StreamSampler feistel over 8 x 16
ranks, the loader's dataset given; one document a call, median of 5, then all 10^4 documents of the
store in one call): ``build_datasets`` with an index cache blends two stores of 10,000 documents
(lognormal lengths, mean 500 tokens) 50/50 in GPT samples of 128 tokens, so the lookups are cache
entries and the receipt check hashes the indices once. The stores are small, so a document is read
in thousands of epochs and its places grow with the sample count (so these rows stop
at 10^6 samples: 10^4 documents hold 2.5 * 10^7 places there, and ten times more at each step up).

The goal is for 10^9 samples; the rows say the sample count they measured: never extrapolated into a
goal row.

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
from tokenport.samples.base import digest
from tokenport.samples.gpt import build_indices
from tokenport.samples.inverse import GPTInverse, gpt_inverse_arrays

DOCUMENTS = 10_000
SEQ_LENGTH = 128
CORPUS_SEQ_LENGTH = 1024
STORE_LIMIT = 10**6  # past it the 10^4 documents of the small store fill 10^8 places and more: memory for the answer


def write_store(prefix: str, seed: int = 0) -> tp.IndexedDataset:
    """10,000 documents of random tokens (lognormal lengths, mean 500), byte tokenizer."""
    rng = np.random.default_rng(seed)
    lengths = lognormal_lengths(rng, DOCUMENTS, 500, 0.8)
    tokens = rng.integers(0, 256, int(lengths.sum())).astype(np.uint16)
    with tp.IndexedDatasetWriter(prefix, dtype=np.uint16, tokenizer=tp.load_tokenizer("byte")) as writer:
        writer.add_documents(tokens, lengths)
    return tp.IndexedDataset(prefix)


def _status(field: str) -> int:
    """A field of /proc/self/status in bytes (VmHWM, VmRSS, RssAnon; 0 where there is none)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak() -> None:
    """Reset VmHWM to the current RSS (Linux >= 4.0), so a later peak is that of what runs after."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _goal_rows(case: str, one: float, many: float) -> list[Row]:
    note = " (goal is for 10^9)"
    return [
        Row("where", f"one document, {case}{note}", "s", one, math.nan, "-", goal=1.0, goal_text="<1 s",
            lower_is_better=True, absolute=True),
        Row("where", f"10^4 documents, {case}{note}", "s", many, math.nan, "-", goal=10.0, goal_text="<10 s",
            lower_is_better=True, absolute=True),
    ]  # fmt: skip


def _queries(ask, documents: int, rng: np.random.Generator) -> tuple[float, float, int, int, int]:
    """(median seconds of one document over 100, seconds of 10^4 documents, places found, peak RSS growth,
    anonymous RSS growth) of ``ask(document)``, which returns the places found."""
    ask(0)  # a first call builds or maps what is lazy
    _reset_peak()
    base, anon = _status("VmRSS"), _status("RssAnon")
    one = []
    for document in rng.integers(0, documents, 100).tolist():
        start = time.perf_counter()
        ask(document)
        one.append(time.perf_counter() - start)
    start = time.perf_counter()
    places = sum(ask(d) for d in rng.integers(0, documents, 10_000).tolist())
    many = time.perf_counter() - start
    return statistics.median(one), many, places, _status("VmHWM") - base, _status("RssAnon") - anon


def _mapped(directory: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The arrays written to ``directory`` as .npy files and memory-mapped back (as the index cache holds them)."""
    out = {}
    for name, array in arrays.items():
        path = os.path.join(directory, name + ".npy")
        np.save(path, array)
        out[name] = np.load(path, mmap_mode="r")
    return out


def measure_corpus(samples: int, directory: str) -> list[Row]:
    """The rows of one sample count over a corpus that grows with it (GPT indices mmap'd, about 1.3 epochs)."""
    rng = np.random.default_rng(2)
    documents = max(1000, int(samples * CORPUS_SEQ_LENGTH / 1000 / 1.3))
    lengths = lognormal_lengths(rng, documents, 1000, 0.8).astype(np.int32)
    built = build_indices(lengths, samples, CORPUS_SEQ_LENGTH, 3)
    names = ("document_index", "sample_index", "shuffle_index")
    directory = os.path.join(directory, f"corpus-{samples}")
    os.makedirs(directory, exist_ok=True)
    indices = _mapped(directory, dict(zip(names, built)))
    del built
    start = time.perf_counter()
    lookups = gpt_inverse_arrays(*(indices[n] for n in names), lengths, 1, "corpus")
    build = time.perf_counter() - start
    size = sum(array.nbytes for array in lookups.values())
    lookups = _mapped(directory, lookups)
    inverse = GPTInverse(*(indices[n] for n in names), lengths, 1, "corpus", lookups)
    one, many, places, peak, anon = _queries(lambda d: len(inverse.occurrences(d)), documents, rng)
    start = time.perf_counter()
    digest(*(indices[n] for n in names))  # what a receipt check hashes (tokenport.occurrences with dataset=)
    hashed = time.perf_counter() - start
    case = f"corpus, 10^{round(math.log10(samples))} samples"
    print(f"{case}: {documents:,} documents, {places:,} places; peak RSS +{peak / 1e6:.1f} MB (mapped file pages "
          f"included), anonymous +{anon / 1e6:.1f} MB; the indices' receipt digest {hashed:.2f} s")  # fmt: skip
    return [
        Row("where", f"lookups build, {case}", "s", build, math.nan, "-", absolute=True),
        Row("where", f"lookups on disk, {case}", "MB", size / 1e6, math.nan, "-", absolute=True),
        Row("where", f"anonymous memory growth over the queries, {case}", "MB", anon / 1e6, math.nan, "-",
            absolute=True),
        Row("where", f"peak RSS growth (mapped pages too), {case}", "MB", peak / 1e6, math.nan, "-", absolute=True),
        Row("where", f"receipt digest of the indices, {case}", "s", hashed, math.nan, "-", absolute=True),
        *_goal_rows(case, one, many),
    ]  # fmt: skip


def measure_store(stores: list[tp.IndexedDataset], samples: int, cache: str) -> list[Row]:
    """The rows of one sample count through tokenport.occurrences (a loader state of a cached 50/50 blend)."""
    from tokenport.integrations import StatefulLoader
    from tokenport.sampling import StreamSampler

    spec = [x for store in stores for x in ("0.5", str(store.prefix))]
    config = tp.GPTSampleConfig(SEQ_LENGTH)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        blend = tp.build_datasets(spec, sizes=(samples, 0, 0), config=config, seed=1, split="1,0,0", cache=cache)[0]
    sampler = StreamSampler(len(blend), 0, 8, 0, 16, seed=1, order="feistel")
    state = StatefulLoader(blend, sampler).state_dict()
    prefix = str(stores[0].prefix)
    start = time.perf_counter()
    blend.occurrences(prefix, 0)
    build = time.perf_counter() - start

    def ask(documents: list[int]) -> int:
        return len(tp.occurrences(state, store=prefix, document=documents, dataset=blend).places)

    rng = np.random.default_rng(1)
    ask([0])
    _reset_peak()
    base = _status("VmRSS")
    one = []
    for document in rng.integers(0, DOCUMENTS, 5).tolist():
        start = time.perf_counter()
        ask([document])
        one.append(time.perf_counter() - start)
    start = time.perf_counter()
    places = ask(list(range(DOCUMENTS)))  # every document of the store, in one call
    many = time.perf_counter() - start
    peak = _status("VmHWM") - base
    case = f"10^{round(math.log10(samples))} samples"
    print(f"{case}: {places:,} places of the 10^4 documents; peak RSS +{peak / 1e6:.1f} MB")
    return [
        Row("where", f"lookups build, {case}", "s", build, math.nan, "-", absolute=True),
        Row("where", f"peak RSS growth over the queries, {case}", "MB", peak / 1e6, math.nan, "-", absolute=True),
        *_goal_rows(case, statistics.median(one), many),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10^5 and 10^6 samples")
    parser.add_argument("--samples", type=float, nargs="+", default=None, help="sample counts (e.g. 1e6 1e7)")
    parser.add_argument("--directory", default=None, help="scratch directory (default: a temporary one)")
    args = parser.parse_args()
    counts = [int(n) for n in (args.samples or ([1e5, 1e6] if args.quick else [1e6, 1e7]))]
    with scratch_directory(args.directory, "bench_where_", args.quick) as directory:
        stores = [write_store(os.path.join(directory, f"store{k}"), k) for k in range(2)]
        rows = [row for samples in counts for row in measure_corpus(samples, directory)]
        cache = os.path.join(directory, "cache")
        rows += [row for n in counts if n <= STORE_LIMIT for row in measure_store(stores, n, cache)]
    print_table(rows)
    print_goals(rows)


if __name__ == "__main__":
    main()
