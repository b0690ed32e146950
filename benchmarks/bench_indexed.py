"""tokenport vs megatron-core on .bin/.idx token stores: reads, scans, writes, open time, memory.

Both libraries read the very same files (tokenport writes them; they are byte-compatible), in
the same process, with the files in the page cache and both readers warmed up by a full pass.
Every figure is the best of N runs timed with time.perf_counter.

    python benchmarks/bench_indexed.py            # the full run (a few minutes, ~6 GB of disk)
    python benchmarks/bench_indexed.py --quick    # a small run (well under a minute)

Cases: "realistic" documents (lognormal lengths, mean ~500 tokens) and "short" documents
(lognormal, mean ~30 tokens), each stored as uint16 and as int32.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass

import numba
import numpy as np

import tokenport as tp
from _harness import Row, best_of, best_of_each, lognormal_lengths, print_table, scratch_directory
from tokenport.indexed.bounds import check_index
from tokenport.indexed.format import IndexHeader
from tokenport.rng.prefetch import prefetch

# -- helpers ----------------------------------------------------------------------------------------


def import_megatron():
    """megatron-core's IndexedDataset and IndexedDatasetBuilder, quietly (no TE/Apex warnings)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets import indexed_dataset as megatron
    logging.getLogger("megatron").setLevel(logging.ERROR)
    return megatron


@dataclass(frozen=True)
class Case:
    name: str  # "realistic" or "short"
    mean: float
    sigma: float
    documents: int


# -- stores -----------------------------------------------------------------------------------------


def build_store(directory: str, case: Case, dtype: np.dtype, seed: int) -> str:
    """A store of `case.documents` random documents, written by tokenport's batched writer."""
    prefix = os.path.join(directory, f"{case.name}_{np.dtype(dtype).name}")
    rng = np.random.default_rng(seed)
    lengths = lognormal_lengths(rng, case.documents, case.mean, case.sigma)
    high = 50_000 if np.dtype(dtype) == np.uint16 else 200_000
    with tp.IndexedDatasetWriter(prefix, dtype=dtype) as writer:
        step = 1 << 16
        for a in range(0, len(lengths), step):
            part = lengths[a : a + step]
            writer.add_documents(rng.integers(0, high, int(part.sum()), dtype=np.int32), part)
    return prefix


def check_same_content(ours: tp.IndexedDataset, theirs, rng: np.random.Generator) -> None:
    for i in rng.integers(0, len(ours), 200).tolist() + [0, len(ours) - 1]:
        a, b = ours[i], theirs[i]
        if a.dtype != b.dtype or not np.array_equal(a, b):
            raise SystemExit(f"content differs between tokenport and megatron at sequence {i}")


def warm(ds, n: int) -> None:
    """Map every page of the store into this reader's mapping (the files are already cached)."""
    for i in range(n):
        ds[i]
    if hasattr(ds, "get_many"):
        step = 1 << 16
        for a in range(0, n, step):
            np.add.reduce(ds.get_many(np.arange(a, min(n, a + step)))[0])
    else:
        step = 1 << 16
        for a in range(0, n, step):
            for view in ds[a : min(n, a + step)]:
                np.add.reduce(view)


# -- sections ---------------------------------------------------------------------------------------


def bench_reads(rows, case: Case, dtype, ours, theirs, args, rng) -> None:
    n = len(ours)
    label = f"{case.name}/{np.dtype(dtype).name}"
    repeat = args.repeat

    # random single reads, one ds[i] per call
    ids = rng.integers(0, n, args.random_reads).tolist()

    def loop(ds):
        def run():
            for i in ids:
                ds[i]

        return run

    t_ours, t_theirs = best_of_each([loop(ours), loop(theirs)], repeat)
    rows.append(Row("random ds[i]", label, "docs/s", len(ids) / t_ours, len(ids) / t_theirs, "megatron", 1.5))

    # batched reads of 1024 random documents; a fresh batch each time, same batches for everyone
    batches = [rng.integers(0, n, args.batch) for _ in range(args.batches)]
    batch_lists = [b.tolist() for b in batches]
    total_docs = args.batch * args.batches

    def get_many():
        for b in batches:
            ours.get_many(b)

    def loop_concat(ds):
        def run():
            for b in batch_lists:
                np.concatenate([ds[i] for i in b])

        return run

    def loop_plain():
        for b in batch_lists:
            [ours[i] for i in b]

    for b in batches[:3]:  # same result as the per-call loop
        tokens, offsets = ours.get_many(b)
        expected = np.concatenate([ours[i] for i in b.tolist()])
        assert np.array_equal(tokens, expected) and offsets[-1] == len(expected)

    t_many, t_concat, t_plain, t_mconcat = best_of_each(
        [get_many, loop_concat(ours), loop_plain, loop_concat(theirs)], repeat
    )
    per = lambda t: total_docs / t  # noqa: E731
    rows.append(Row(f"get_many({args.batch})", label, "docs/s", per(t_many), per(t_concat), "tp loop+concat", 5.0))
    rows.append(Row(f"get_many({args.batch})", label, "docs/s", per(t_many), per(t_plain), "tp loop"))
    rows.append(Row(f"get_many({args.batch})", label, "docs/s", per(t_many), per(t_mconcat), "megatron loop+concat"))

    # the same batch again and again: its tokens stay in the CPU caches, so this isolates the
    # per-document overhead from the memory latency of random documents
    hot, hot_list = batches[0], batch_lists[0]

    def hot_many():
        for _ in range(args.batches):
            ours.get_many(hot)

    def hot_concat():
        for _ in range(args.batches):
            np.concatenate([ours[i] for i in hot_list])

    t_many, t_concat = best_of_each([hot_many, hot_concat], repeat)
    rows.append(
        Row(f"get_many({args.batch}), same batch", label, "docs/s", per(t_many), per(t_concat), "tp loop+concat")
    )

    # the memory floor: only reading the batches' tokens (numba sums, prefetched as get_many
    # does), no output; any reader, the per-call loop included, pays at least this
    tokens = ours.token_array()
    itemsize = np.dtype(dtype).itemsize
    ranges = [(ours.sequence_pointers[b] // itemsize, ours.sequence_lengths[b].astype(np.int64)) for b in batches]

    def touch():
        for starts, lengths in ranges:
            _touch(tokens, starts, lengths)

    t_many, t_concat, t_touch = best_of_each([get_many, loop_concat(ours), touch], repeat)
    rows.append(
        Row(f"get_many({args.batch}) vs reading alone", label, "docs/s", per(t_many), per(t_touch), "memory floor")
    )
    print(
        f"  {label}: get_many {t_many / total_docs * 1e6:.3f} us/doc, reading the tokens alone "
        f"{t_touch / total_docs * 1e6:.3f} us/doc, loop+concat {t_concat / total_docs * 1e6:.3f} us/doc: "
        f"get_many is {t_concat / t_many:.2f}x the loop; a reader at the floor would be {t_concat / t_touch:.2f}x",
        flush=True,
    )


@numba.njit(cache=True, boundscheck=False)
def _touch(tokens, starts, lengths):
    """Sum the tokens of the ranges (start, length): the memory traffic of a gather, without its output."""
    total = 0
    n = len(starts)
    for k in range(min(16, n)):
        prefetch(tokens, starts[k])
    for k in range(n):
        if k + 16 < n:
            prefetch(tokens, starts[k + 16])
        source = tokens[starts[k] : starts[k] + lengths[k]]
        for t in range(lengths[k]):
            total += source[t]
    return total


def bench_scan(rows, case: Case, dtype, ours, theirs, args) -> None:
    n = len(ours)
    label = f"{case.name}/{np.dtype(dtype).name}"
    tokens = ours.num_tokens
    reduce = np.add.reduce

    def per_doc(ds):
        def run():
            for i in range(n):
                reduce(ds[i])

        return run

    step = 4096

    def ours_blocks():
        for a in range(0, n, step):
            reduce(ours.get_many(np.arange(a, min(n, a + step)))[0])

    def theirs_blocks():
        for a in range(0, n, step):
            for view in theirs[a : min(n, a + step)]:
                reduce(view)

    t_ours, t_theirs = best_of_each([per_doc(ours), per_doc(theirs)], args.scan_repeat)
    rows.append(Row("scan, per doc", label, "tokens/s", tokens / t_ours, tokens / t_theirs, "megatron", 1.0))
    t_ours_b, t_theirs_b = best_of_each([ours_blocks, theirs_blocks], args.scan_repeat)
    rows.append(
        Row(f"scan, {step}-doc blocks", label, "tokens/s", tokens / t_ours_b, tokens / t_theirs_b, "megatron ds[a:b]")
    )


def document_pool(case: Case, count: int, seed: int, input_dtype=np.int32):
    """`count` distinct documents (cycled by the write loops, so inputs cost no memory growth)."""
    rng = np.random.default_rng(seed)
    lengths = lognormal_lengths(rng, count, case.mean, case.sigma)
    flat = rng.integers(0, 50_000, int(lengths.sum()), dtype=input_dtype)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    docs = [flat[bounds[k] : bounds[k + 1]] for k in range(count)]
    return docs, [[len(d)] for d in docs], flat, lengths


POOL = 4096


def write_tokenport(prefix: str, dtype, docs, documents: int) -> None:
    with tp.IndexedDatasetWriter(prefix, dtype=dtype) as writer:
        add = writer.add_document
        mask = POOL - 1
        for k in range(documents):
            add(docs[k & mask])


def write_tokenport_batched(prefix: str, dtype, flat, lengths, documents: int) -> None:
    with tp.IndexedDatasetWriter(prefix, dtype=dtype) as writer:
        for _ in range(documents // POOL):
            writer.add_documents(flat, lengths)


def write_megatron(megatron, prefix: str, dtype, docs, lens, documents: int) -> None:
    builder = megatron.IndexedDatasetBuilder(prefix + ".bin", dtype=np.dtype(dtype).type)
    add = builder.add_document
    mask = POOL - 1
    for k in range(documents):
        add(docs[k & mask], lens[k & mask])
    builder.finalize(prefix + ".idx")


def bench_write(rows, case: Case, dtype, documents: int, args, directory: str, megatron, batched: bool) -> None:
    label = f"{case.name}/{np.dtype(dtype).name}"
    docs, lens, flat, lengths = document_pool(case, POOL, seed=7)
    documents -= documents % POOL
    tokens = int(lengths.sum()) * (documents // POOL)
    ours_prefix = os.path.join(directory, "w_ours")
    theirs_prefix = os.path.join(directory, "w_theirs")
    t_ours, t_theirs = best_of_each(
        [
            lambda: write_tokenport(ours_prefix, dtype, docs, documents),
            lambda: write_megatron(megatron, theirs_prefix, dtype, docs, lens, documents),
        ],
        args.write_repeat,
    )
    for suffix in (".bin", ".idx"):  # same bytes out
        if not filecmp_equal(ours_prefix + suffix, theirs_prefix + suffix):
            raise SystemExit(f"write: {suffix} files differ between tokenport and megatron")
    what = f"write {documents:,} docs"
    rows.append(Row(what, label, "docs/s", documents / t_ours, documents / t_theirs, "megatron", 1.0))
    rows.append(Row(what, label, "tokens/s", tokens / t_ours, tokens / t_theirs, "megatron"))
    if batched:
        t_batch = best_of(
            lambda: write_tokenport_batched(ours_prefix, dtype, flat, lengths, documents), args.write_repeat
        )
        if not filecmp_equal(ours_prefix + ".bin", theirs_prefix + ".bin"):
            raise SystemExit("write: add_documents wrote different bytes")
        rows.append(
            Row(
                f"add_documents({POOL})",
                label,
                "docs/s",
                documents / t_batch,
                documents / t_theirs,
                "megatron per-doc",
                3.0,
            )
        )
    for prefix in (ours_prefix, theirs_prefix):
        for suffix in (".bin", ".idx", ".json"):
            if os.path.exists(prefix + suffix):
                os.unlink(prefix + suffix)


def filecmp_equal(a: str, b: str) -> bool:
    if os.path.getsize(a) != os.path.getsize(b):
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(1 << 24), fb.read(1 << 24)
            if x != y:
                return False
            if not x:
                return True


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


def memory_probe(library: str, documents: int, dtype_name: str, directory: str) -> None:
    """(Run in a fresh process) peak RSS growth, in MB, of writing `documents` short documents."""
    dtype = np.dtype(dtype_name)
    case = Case("short", 30, 0.5, 0)
    docs, lens, _, _ = document_pool(case, POOL, seed=7)
    megatron = import_megatron() if library == "megatron" else None
    prefix = os.path.join(directory, f"mem_{library}")
    gc.collect()
    try:  # reset the peak (VmHWM) to the current RSS
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    baseline = _status_kb("VmRSS")
    if library == "tokenport":
        write_tokenport(prefix, dtype, docs, documents)
    else:
        write_megatron(megatron, prefix, dtype, docs, lens, documents)
    peak = _status_kb("VmHWM")
    for suffix in (".bin", ".idx", ".json"):
        if os.path.exists(prefix + suffix):
            os.unlink(prefix + suffix)
    print(max(0, peak - baseline) / 1024)


def bench_memory(rows, documents: int, directory: str) -> None:
    def probe(library: str, count: int) -> float:
        out = subprocess.run(
            [
                sys.executable,
                "-W",
                "ignore",
                __file__,
                "--_memory-probe",
                library,
                str(count),
                "uint16",
                "--dir",
                directory,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        return float(out.stdout.strip().splitlines()[-1])

    peaks = {
        (library, count): probe(library, count)
        for count in (documents, 2 * documents)
        for library in ("tokenport", "megatron")
    }
    for count in (documents, 2 * documents):
        rows.append(
            Row(
                f"peak RSS growth, write {count:,} docs",
                "short/uint16",
                "MB",
                peaks["tokenport", count],
                peaks["megatron", count],
                "megatron",
                lower_is_better=True,
            )
        )
    growth = lambda library: peaks[library, 2 * documents] / max(peaks[library, documents], 0.1)  # noqa: E731
    rows.append(
        Row(
            "peak RSS, 2N docs / N docs",
            "short/uint16",
            "x",
            growth("tokenport"),
            growth("megatron"),
            "megatron",
            lower_is_better=True,
        )
    )


def build_huge_index(prefix: str, sequences: int) -> None:
    """A synthetic store of `sequences` one-token sequences (one per document), via numpy directly."""
    dtype = np.dtype(np.uint16)
    header = IndexHeader(dtype, sequences, sequences + 1)
    step = 1 << 24
    with open(prefix + ".idx", "wb") as f:
        f.write(header.pack())
        for a in range(0, sequences, step):
            np.ones(min(step, sequences - a), dtype=np.int32).tofile(f)
        for a in range(0, sequences, step):
            (np.arange(a, min(sequences, a + step), dtype=np.int64) * dtype.itemsize).tofile(f)
        for a in range(0, sequences + 1, step):
            np.arange(a, min(sequences + 1, a + step), dtype=np.int64).tofile(f)
    with open(prefix + ".bin", "wb") as f:
        f.truncate(sequences * dtype.itemsize)  # sparse


def bench_open(rows, sequences: int, directory: str, megatron, args) -> None:
    prefix = os.path.join(directory, "huge")
    build_huge_index(prefix, sequences)
    with open(prefix + ".idx", "rb") as f:  # into the page cache
        while f.read(1 << 26):
            pass

    def ours_open():
        tp.IndexedDataset(prefix).close()

    def ours():
        ds = tp.IndexedDataset(prefix)
        ds[len(ds) - 1]  # the first use of the index checks every pointer and length (bounds.check_index)
        ds.close()

    def theirs():
        ds = megatron.IndexedDataset(prefix)
        ds[len(ds) - 1]
        del ds

    t_open, t_ours, t_theirs = best_of_each([ours_open, ours, theirs], args.repeat)
    label = f"{sequences:.0e} seqs".replace("+0", "")
    rows.append(Row("open (header + sizes)", label, "s", t_open, t_theirs, "megatron open+read", lower_is_better=True))
    rows.append(Row("open + read last seq", label, "s", t_ours, t_theirs, "megatron", lower_is_better=True))
    if t_ours >= 1.0:
        print(f"!! tokenport open + first read took {t_ours:.2f} s (goal: under 1 s)")
    ds = tp.IndexedDataset(prefix)
    arrays = ds._index.get()  # mapped and checked once; now time the check alone, pages mapped
    t_check = best_of(
        lambda arrays=arrays: check_index(
            arrays.lengths, arrays.pointers, arrays.documents, 2, ds.bin_size, ds._idx.url, ds._bin.url
        ),
        args.repeat,
    )
    rows.append(
        Row(
            "index check alone (pages mapped)",
            label,
            "s",
            t_check,
            t_theirs,
            "megatron open+read",
            lower_is_better=True,
        )
    )
    del arrays
    ds.close()
    for suffix in (".bin", ".idx"):
        os.unlink(prefix + suffix)


# -- main -------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small run (smaller stores, fewer repeats)")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a new temporary one)")
    parser.add_argument(
        "--sections", default="read,scan,write,memory,open", help="comma-separated: read,scan,write,memory,open"
    )
    parser.add_argument("--dtypes", default="uint16,int32")
    parser.add_argument("--repeat", type=int, default=None, help="best of N for reads (default 7, quick 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--_memory-probe", nargs=3, metavar=("LIB", "DOCS", "DTYPE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args._memory_probe:
        library, count, dtype_name = args._memory_probe
        memory_probe(library, int(count), dtype_name, args.dir or tempfile.gettempdir())
        return

    quick = args.quick
    args.repeat = args.repeat or (3 if quick else 7)
    args.scan_repeat = 2 if quick else 3
    args.write_repeat = 2 if quick else 3
    args.random_reads = 50_000 if quick else 200_000
    args.batch = 1024
    args.batches = 20 if quick else 50
    cases = [
        Case("realistic", 500, 1.0, 20_000 if quick else 200_000),
        Case("short", 30, 0.5, 100_000 if quick else 1_000_000),
    ]
    write_docs = {"short": 100_000 if quick else 1_000_000, "realistic": 20_000 if quick else 200_000}
    memory_docs = 100_000 if quick else 1_000_000
    huge_sequences = 10**7 if quick else 10**8
    dtypes = [np.dtype(name) for name in args.dtypes.split(",")]
    sections = set(args.sections.split(","))

    megatron = import_megatron()
    rows: list[Row] = []
    with scratch_directory(args.dir, "bench_indexed_", quick) as directory:
        rng = np.random.default_rng(args.seed)
        if sections & {"read", "scan"}:
            for case in cases:
                for dtype in dtypes:
                    t0 = time.perf_counter()
                    prefix = build_store(directory, case, dtype, seed=args.seed + 1)
                    ours = tp.IndexedDataset(prefix)
                    theirs = megatron.IndexedDataset(prefix)
                    check_same_content(ours, theirs, rng)
                    warm(ours, len(ours))
                    warm(theirs, len(theirs))
                    print(
                        f"  {case.name}/{dtype.name}: {len(ours):,} docs, {ours.num_tokens:,} tokens, "
                        f"mean {ours.num_tokens / len(ours):.1f}; built and warmed in {time.perf_counter() - t0:.1f} s",
                        flush=True,
                    )
                    if "read" in sections:
                        bench_reads(rows, case, dtype, ours, theirs, args, rng)
                    if "scan" in sections:
                        bench_scan(rows, case, dtype, ours, theirs, args)
                    ours.close()
                    del theirs
                    for suffix in (".bin", ".idx", ".json"):
                        os.unlink(prefix + suffix)
        if "write" in sections:
            for case in cases:
                for dtype in dtypes:
                    bench_write(
                        rows,
                        case,
                        dtype,
                        write_docs[case.name],
                        args,
                        directory,
                        megatron,
                        batched=case.name == "short",
                    )
                    print(f"  write {case.name}/{dtype.name} done", flush=True)
        if "memory" in sections:
            bench_memory(rows, memory_docs, directory)
        if "open" in sections:
            bench_open(rows, huge_sequences, directory, megatron, args)
    print()
    print_table(rows)
    print()
    print("ratio: tokenport / baseline for rates; baseline / tokenport for times and memory (higher is better).")


if __name__ == "__main__":
    main()
