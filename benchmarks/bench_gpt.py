"""tokenport vs megatron-core GPTDataset: index builds, many small stores, and sample reads.

Both libraries work on the very same token store (written by tokenport; the formats are
byte-compatible), in the same process, with the files in the page cache. Every figure is the
best of N runs timed with time.perf_counter, the two sides timed in turns (A B A B ...).

    python benchmarks/bench_gpt.py            # the full run (a few minutes, ~3 GB of disk)
    python benchmarks/bench_gpt.py --quick    # a small run (under a minute)

Sections:
  index   one store of 10^6 documents (lognormal lengths, mean ~1000 tokens, each ending in an
          EOD), seq_length 4096, ~2.5 epochs of samples: tokenport.samples.gpt.build_indices vs
          megatron's GPTDataset._build_document_sample_shuffle_indices (no cache path).
  open    opening the big store's train dataset when its indices are cached (goal: <= 50 ms).
  stores  many small stores (~2,000 documents each), end to end: open the store and build its
          indices. tokenport: IndexedDataset + build_indices. megatron: IndexedDataset +
          GPTDataset(path_to_cache=None) -- which, as megatron does by default, also saves the
          indices as .npy under <prefix>/cache; that cache is removed before every megatron run so
          that each run builds. Then both load their caches (tokenport: build_gpt_dataset with an
          IndexCache), and a goal-less row compares tokenport rebuilding with megatron loading.
  samples ds[i] at seq_length 4096 on the big store, random sample ids: no flags; the three flags
          (reset_position_ids, reset_attention_mask, eod_mask_loss) without a dense mask; the
          three flags with the dense mask (create_attention_mask=True). Plus tokenport's
          get_batch of 8 samples, per sample, against megatron's ds[i].
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import shutil
import time
import types
import warnings

import numpy as np

import tokenport as tp
from _harness import Row, best_of_each, lognormal_lengths, print_goals, print_table, scratch_directory
from tokenport.samples.gpt import GPTDataset, GPTSampleConfig, build_indices

EOD = 2
SEQ_LENGTH = 4096
EPOCHS = 2.5
MEAN_LENGTH = 1000
SIGMA = 1.0
VOCAB = 50_000

# -- helpers ----------------------------------------------------------------------------------------


def import_megatron():
    """megatron-core's GPTDataset module, IndexedDataset and Split, quietly (no TE/Apex warnings)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets import gpt_dataset
        from megatron.core.datasets.indexed_dataset import IndexedDataset
        from megatron.core.datasets.utils import Split
    logging.getLogger("megatron").setLevel(logging.ERROR)
    return types.SimpleNamespace(gpt_dataset=gpt_dataset, IndexedDataset=IndexedDataset, Split=Split)


# -- stores -----------------------------------------------------------------------------------------


def write_store(prefix: str, lengths: np.ndarray, base: np.ndarray) -> None:
    """A uint16 store of documents with the given lengths, each ending in EOD.

    Tokens are the random `base` array tiled (no EOD inside), cut by `lengths`, the last token
    of every document set to EOD; written in batches with add_documents.
    """
    with tp.IndexedDatasetWriter(prefix, dtype=np.uint16) as writer:
        step = 1 << 14
        for a in range(0, len(lengths), step):
            part = lengths[a : a + step]
            total = int(part.sum())
            tokens = base[:total].copy() if total <= len(base) else np.resize(base, total)
            tokens[np.cumsum(part) - 1] = EOD
            writer.add_documents(tokens, part)


def samples_for(lengths: np.ndarray) -> int:
    """The sample count giving ~EPOCHS epochs of the store at SEQ_LENGTH."""
    return int(EPOCHS * int(lengths.sum()) / SEQ_LENGTH)


def remove_store(prefix: str) -> None:
    for suffix in (".bin", ".idx", ".json"):
        if os.path.exists(prefix + suffix):
            os.unlink(prefix + suffix)
    clear_megatron_cache(prefix)


def clear_megatron_cache(prefix: str) -> None:
    """megatron's GPTDataset with path_to_cache=None saves its indices under <prefix>/cache."""
    if os.path.isdir(prefix):
        shutil.rmtree(prefix)


def megatron_config(megatron, prefix: str, config: GPTSampleConfig, seed: int, tag: str):
    """megatron's GPTDatasetConfig for a store and a tokenport sample config (no pad id)."""
    tokenizer = types.SimpleNamespace(eod=config.eod_id, vocab_size=None, unique_identifiers={"bench_gpt": tag})
    return megatron.gpt_dataset.GPTDatasetConfig(
        random_seed=seed,
        sequence_length=config.seq_length,
        blend=([prefix], None),
        split="1,0,0",
        path_to_cache=None,
        tokenizer=tokenizer,
        reset_position_ids=config.reset_position_ids,
        reset_attention_mask=config.reset_attention_mask,
        eod_mask_loss=config.eod_mask_loss,
        create_attention_mask=config.create_attention_mask,
        add_extra_token_to_sequence=config.add_extra_token,
    )


class _Peer:
    """Exactly what megatron's GPTDataset index builder reads (as in tests/samples/test_gpt_indices.py), no cache."""

    def __init__(self, megatron, lengths: np.ndarray, num_samples: int, seq_length: int, seed: int) -> None:
        cls = megatron.gpt_dataset.GPTDataset
        self._build = cls._build_document_sample_shuffle_indices
        self._get_num_tokens_per_epoch = types.MethodType(cls._get_num_tokens_per_epoch, self)
        self._get_num_epochs = types.MethodType(cls._get_num_epochs, self)
        self.dataset = types.SimpleNamespace(sequence_lengths=lengths)
        self.indices = np.arange(len(lengths), dtype=np.int32)
        self.num_samples = num_samples
        self.index_split = megatron.Split.train
        self.config = types.SimpleNamespace(
            defer_npy_index_mmap=False,
            path_to_cache=None,
            mock=True,
            fast_cache_load=False,
            sequence_length=seq_length,
            random_seed=seed,
            add_extra_token_to_sequence=True,
            drop_last_partial_validation_sequence=True,
        )

    def build(self):
        return self._build(self)


# -- sections ---------------------------------------------------------------------------------------


def bench_index(rows, megatron, lengths: np.ndarray, args) -> None:
    num_samples = samples_for(lengths)
    peer = _Peer(megatron, lengths, num_samples, SEQ_LENGTH, args.seed)
    ours = build_indices(lengths, num_samples, SEQ_LENGTH, args.seed)
    theirs = peer.build()
    for name, a, b in zip(("document", "sample", "shuffle"), ours, theirs):
        if a.dtype != b.dtype or not np.array_equal(a, b):
            raise SystemExit(f"index: the {name} indices differ between tokenport and megatron")
    del ours, theirs
    t_ours, t_theirs = best_of_each(
        [lambda: build_indices(lengths, num_samples, SEQ_LENGTH, args.seed), peer.build], args.index_repeat
    )
    case = f"{len(lengths):,} docs, {num_samples:,} samples"
    rows.append(
        Row(
            "index build, one store",
            case,
            "s",
            t_ours,
            t_theirs,
            "megatron _build_...indices",
            1 / 1.1,
            "tp <=1.1x megatron time",
            lower_is_better=True,
        )
    )


def bench_stores(rows, megatron, directory: str, args, base: np.ndarray) -> None:
    rng = np.random.default_rng(args.seed + 2)
    prefixes, counts = [], []
    for k in range(args.stores):
        lengths = lognormal_lengths(rng, int(rng.integers(1800, 2200)), MEAN_LENGTH, SIGMA)
        prefix = os.path.join(directory, f"small_{k:04d}")
        write_store(prefix, lengths, base[int(rng.integers(0, 1 << 20)) :])
        prefixes.append(prefix)
        counts.append(samples_for(lengths))
    sample_config = GPTSampleConfig(seq_length=SEQ_LENGTH, eod_id=EOD)

    def ours():
        for prefix, num_samples in zip(prefixes, counts):
            ds = tp.IndexedDataset(prefix)
            build_indices(ds.sequence_lengths, num_samples, SEQ_LENGTH, args.seed)
            ds.close()

    def theirs():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = megatron_config(megatron, prefixes[0], sample_config, args.seed, "stores")
            for prefix, num_samples in zip(prefixes, counts):
                low = megatron.IndexedDataset(prefix)
                megatron.gpt_dataset.GPTDataset(
                    low, prefix, np.arange(len(low), dtype=np.int32), num_samples, megatron.Split.train, config
                )

    def clear():
        for prefix in prefixes:
            clear_megatron_cache(prefix)

    # same indices on every store checked on the first and last
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = megatron_config(megatron, prefixes[0], sample_config, args.seed, "check")
        for prefix, num_samples in ((prefixes[0], counts[0]), (prefixes[-1], counts[-1])):
            low = megatron.IndexedDataset(prefix)
            peer = megatron.gpt_dataset.GPTDataset(
                low, prefix, np.arange(len(low), dtype=np.int32), num_samples, megatron.Split.train, config
            )
            mine = build_indices(tp.IndexedDataset(prefix).sequence_lengths, num_samples, SEQ_LENGTH, args.seed)
            for a, b in zip(mine, (peer.document_index, peer.sample_index, peer.shuffle_index)):
                if not np.array_equal(a, b):
                    raise SystemExit(f"stores: indices differ between tokenport and megatron on {prefix}")
    ours()
    theirs()  # warm both (imports, first-call costs)
    t_ours, t_theirs = best_of_each([ours, theirs], args.index_repeat, setups=[None, clear])
    cache = tp.IndexCache(os.path.join(directory, "index-cache"))

    def ours_cached():
        for prefix, num_samples in zip(prefixes, counts):
            ds = tp.IndexedDataset(prefix)
            tp.build_gpt_dataset(ds, num_samples, sample_config, args.seed, cache=cache)
            ds.close()

    ours_cached()  # fills tokenport's cache; megatron's is there from its last build
    t_ours_hit, t_cached = best_of_each([ours_cached, theirs], args.index_repeat)
    case = f"{args.stores} stores x ~2,000 docs"
    rows.append(
        Row(
            "open + build indices, all",
            case,
            "s",
            t_ours,
            t_theirs,
            "megatron GPTDataset (build+save)",
            10.0,
            ">=10x",
            lower_is_better=True,
        )
    )
    rows.append(
        Row(
            "open from the cache, all",
            case,
            "s",
            t_ours_hit,
            t_cached,
            "megatron GPTDataset (cache hit)",
            10.0,
            ">=10x",
            lower_is_better=True,
        )
    )
    rows.append(
        Row(
            "open + build, no cache",
            case,
            "s",
            t_ours,
            t_cached,
            "megatron GPTDataset (cache hit)",
            lower_is_better=True,
        )
    )
    shutil.rmtree(cache.directory)
    for prefix in prefixes:
        remove_store(prefix)


SAMPLE_CASES = (
    ("no flags", dict(), 3.0),
    ("3 flags, no mask", dict(reset_position_ids=True, reset_attention_mask=True, eod_mask_loss=True), 10.0),
    (
        "3 flags, dense mask",
        dict(reset_position_ids=True, reset_attention_mask=True, eod_mask_loss=True, create_attention_mask=True),
        50.0,
    ),
)


def bench_open_cached(rows, megatron, prefix: str, directory: str, args) -> None:
    """Opening the big store's cached train dataset: store + cache lookup + memory maps, in a fresh
    IndexedDataset each time (megatron: GPTDataset finding its own .npy cache)."""
    num_samples = samples_for(tp.IndexedDataset(prefix).sequence_lengths)
    config = GPTSampleConfig(seq_length=SEQ_LENGTH, eod_id=EOD)
    cache = tp.IndexCache(os.path.join(directory, "index-cache-big"))

    def ours():
        tp.build_gpt_dataset(tp.IndexedDataset(prefix), num_samples, config, args.seed, cache=cache)

    def theirs():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            low = megatron.IndexedDataset(prefix)
            megatron.gpt_dataset.GPTDataset(
                low,
                prefix,
                np.arange(len(low), dtype=np.int32),
                num_samples,
                megatron.Split.train,
                megatron_config(megatron, prefix, config, args.seed, "open"),
            )

    ours()
    theirs()  # both caches now hold the entry
    t_ours, t_theirs = best_of_each([ours, theirs], args.index_repeat)
    case = f"{len(tp.IndexedDataset(prefix)):,} docs, {num_samples:,} samples"
    rows.append(
        Row("open a cached dataset", case, "s", t_ours, 0.050, "the 50 ms budget", 1.0, "<=50 ms", lower_is_better=True)
    )
    rows.append(
        Row(
            "open a cached dataset",
            case,
            "s",
            t_ours,
            t_theirs,
            "megatron GPTDataset (cache hit)",
            lower_is_better=True,
        )
    )
    shutil.rmtree(cache.directory)
    clear_megatron_cache(prefix)


def bench_samples(rows, megatron, prefix: str, args) -> None:
    low_ours = tp.IndexedDataset(prefix)
    low_theirs = megatron.IndexedDataset(prefix)
    lengths = low_ours.sequence_lengths
    num_samples = samples_for(lengths)
    indices = np.arange(len(lengths), dtype=np.int32)
    rng = np.random.default_rng(args.seed + 3)
    for name, flags, goal in SAMPLE_CASES:
        config = GPTSampleConfig(seq_length=SEQ_LENGTH, eod_id=EOD, **flags)
        ours = GPTDataset(low_ours, indices, num_samples, config, args.seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = megatron.gpt_dataset.GPTDataset(
                low_theirs,
                prefix,
                indices.copy(),
                num_samples,
                megatron.Split.train,
                megatron_config(megatron, prefix, config, args.seed, name),
            )
        dense = config.create_attention_mask
        count = args.mask_samples if dense else args.samples
        count -= count % 8
        ids = rng.integers(0, len(ours), count)
        id_list = ids.tolist()
        batches = [ids[a : a + 8] for a in range(0, count, 8)]

        for i in id_list[:3]:  # same samples
            mine, peer = ours[i], theirs[i]
            for field, tensor in peer.items():
                if not np.array_equal(mine[field], tensor.numpy()):
                    raise SystemExit(f"samples ({name}): field {field} of sample {i} differs")
        if "cu_seqlens" not in mine:
            raise SystemExit("samples: tokenport returned no cu_seqlens")

        def loop(ds):
            def run():
                for i in id_list:
                    ds[i]

            return run

        get = ours.get_batch

        def batched():
            for b in batches:
                get(b)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for fn in (loop(ours), loop(theirs), batched):  # warm the mappings and caches
                fn()
            t_ours, t_theirs, t_batch = best_of_each([loop(ours), loop(theirs), batched], args.sample_repeat)
        case = f"{name}, {count} samples"
        rows.append(
            Row(
                "ds[i], seq 4096",
                case,
                "s/sample",
                t_ours / count,
                t_theirs / count,
                "megatron ds[i]",
                goal,
                lower_is_better=True,
            )
        )
        rows.append(
            Row(
                "get_batch(8), seq 4096",
                case,
                "s/sample",
                t_batch / count,
                t_theirs / count,
                "megatron ds[i]",
                lower_is_better=True,
            )
        )
        del ours, theirs
        gc.collect()
    low_ours.close()
    del low_theirs


# -- main -------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small run (smaller stores, fewer repeats)")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a new temporary one)")
    parser.add_argument(
        "--sections", default="index,open,stores,samples", help="comma-separated: index,open,stores,samples"
    )
    parser.add_argument("--docs", type=int, default=None, help="documents in the big store (default 10^6, quick 10^5)")
    parser.add_argument("--stores", type=int, default=None, help="number of small stores (default 200, quick 30)")
    parser.add_argument(
        "--samples", type=int, default=None, help="random samples read per case (default 400, quick 96)"
    )
    parser.add_argument(
        "--mask-samples", type=int, default=None, help="samples with the dense mask (default 40, quick 16)"
    )
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)

    quick = args.quick
    args.docs = args.docs or (10**5 if quick else 10**6)
    args.stores = args.stores or (30 if quick else 200)
    args.samples = args.samples or (96 if quick else 400)
    args.mask_samples = args.mask_samples or (16 if quick else 40)
    args.index_repeat = 3
    args.sample_repeat = 3
    sections = set(args.sections.split(","))

    megatron = import_megatron()
    rows: list[Row] = []
    with scratch_directory(args.dir, "bench_gpt_", quick) as directory:
        prefix = os.path.join(directory, "big")
        try:
            rng = np.random.default_rng(args.seed)
            base = rng.integers(EOD + 1, VOCAB, 1 << 25, dtype=np.uint16)
            lengths = lognormal_lengths(rng, args.docs, MEAN_LENGTH, SIGMA)
            if sections & {"index", "open", "samples"}:
                t0 = time.perf_counter()
                write_store(prefix, lengths, base)
                stored = tp.IndexedDataset(prefix).sequence_lengths
                print(
                    f"  big store: {len(stored):,} docs, {int(stored.sum(dtype=np.int64)):,} tokens, "
                    f"mean {stored.mean():.1f}; written in {time.perf_counter() - t0:.1f} s",
                    flush=True,
                )
            if "index" in sections:
                t0 = time.perf_counter()
                bench_index(rows, megatron, tp.IndexedDataset(prefix).sequence_lengths, args)
                print(f"  index done in {time.perf_counter() - t0:.1f} s", flush=True)
            if "open" in sections:
                t0 = time.perf_counter()
                bench_open_cached(rows, megatron, prefix, directory, args)
                print(f"  open done in {time.perf_counter() - t0:.1f} s", flush=True)
            if "stores" in sections:
                t0 = time.perf_counter()
                bench_stores(rows, megatron, directory, args, base)
                print(f"  stores done in {time.perf_counter() - t0:.1f} s", flush=True)
            if "samples" in sections:
                t0 = time.perf_counter()
                bench_samples(rows, megatron, prefix, args)
                print(f"  samples done in {time.perf_counter() - t0:.1f} s", flush=True)
        finally:
            remove_store(prefix)
    print()
    print_table(rows)
    print()
    print("ratio: baseline / tokenport time (higher is better).")
    print_goals(rows)


if __name__ == "__main__":
    main()
