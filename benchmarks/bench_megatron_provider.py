"""The Megatron-LM datasets provider vs megatron-core's own, from the same arguments: start-up and samples.

What a Megatron-LM run feels: pretrain_gpt.py's provider builds (or loads from --data-cache-path)
the train/valid/test datasets of a weighted blend, then the loader reads samples. Both sides get
the very same args (a weighted --data-path over K stores, --split 98,2,0, --seq-length, --seed,
--data-cache-path) and sizes; megatron-core's side is what pretrain_gpt.py does
(GPTDatasetConfig + BlendedMegatronDatasetBuilder), under a one-process gloo group as in a
one-rank run (its blend cache needs one). Identical samples are checked before timing; every
figure is the best of N runs, the sides timed in turns (A B A B ...).

    python benchmarks/bench_megatron_provider.py            # 16 stores, 10^6 train samples
    python benchmarks/bench_megatron_provider.py --quick    # 4 stores, 10^5 train samples

Sections:
  cold     build every index and save it to an emptied cache directory (tokenport fsyncs each
           file and directory it publishes; megatron-core does not).
  no cache dir  no --data-cache-path: tokenport builds in memory; megatron-core still saves its
           GPT indices under PREFIX/cache (emptied before each of its runs) and keeps its blends
           in memory.
  warm     the same call with the cache filled: what every later start of the run pays.
  samples  ds[i] on the train blend at random ids, torch tensors out on both sides (tokenport:
           MegatronSamples over its BlendedDataset; megatron-core: its BlendedDataset).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
import types
import warnings

import numpy as np

import tokenport as tp
from _harness import Row, best_of_each, lognormal_lengths, print_goals, print_table, scratch_directory
from tokenport.integrations.megatron import datasets_provider

EOD = 2
VOCAB = 50_000
SEQ_LENGTH = 2048
MEAN_LENGTH = 600
SIGMA = 1.0


def import_megatron():
    """megatron-core's GPT dataset module, its builder and get_blend_from_list, quietly."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets import gpt_dataset
        from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
        from megatron.core.datasets.utils import get_blend_from_list
    logging.getLogger("megatron").setLevel(logging.ERROR)
    return types.SimpleNamespace(
        gpt_dataset=gpt_dataset, Builder=BlendedMegatronDatasetBuilder, get_blend_from_list=get_blend_from_list
    )


def write_stores(directory: str, count: int, docs: int, seed: int) -> list[str]:
    """`count` uint16 stores of `docs` lognormal-length documents, each ending in EOD."""
    rng = np.random.default_rng(seed)
    prefixes = []
    for k in range(count):
        lengths = lognormal_lengths(rng, docs, MEAN_LENGTH, SIGMA)
        tokens = rng.integers(EOD + 1, VOCAB, int(lengths.sum()), dtype=np.uint16)
        tokens[np.cumsum(lengths) - 1] = EOD
        prefix = os.path.join(directory, f"store{k:02d}")
        with tp.IndexedDatasetWriter(prefix, dtype=np.uint16) as writer:
            writer.add_documents(tokens, lengths)
        prefixes.append(prefix)
    return prefixes


def megatron_build(megatron, args: argparse.Namespace, sizes: tuple[int, int, int]):
    """pretrain_gpt.py's provider body for these args (core_gpt_dataset_config_from_args + the builder)."""
    config = megatron.gpt_dataset.GPTDatasetConfig(
        random_seed=args.seed,
        sequence_length=args.seq_length,
        blend=megatron.get_blend_from_list(args.data_path),
        split=args.split,
        path_to_cache=args.data_cache_path,
        tokenizer=types.SimpleNamespace(eod=EOD, vocab_size=None, unique_identifiers={"bench": "provider"}),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return megatron.Builder(megatron.gpt_dataset.GPTDataset, list(sizes), lambda: True, config).build()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small run (4 stores, 10^5 train samples)")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a new temporary one)")
    parser.add_argument("--stores", type=int, default=None, help="stores in the blend (default 16, quick 4)")
    parser.add_argument("--docs", type=int, default=10_000, help="documents per store")
    parser.add_argument("--train", type=int, default=None, help="train samples (default 10^6, quick 10^5)")
    parser.add_argument("--samples", type=int, default=2000, help="ds[i] calls timed per side")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1234)
    options = parser.parse_args(argv)
    stores = options.stores or (4 if options.quick else 16)
    train = options.train or (10**5 if options.quick else 10**6)
    sizes = (train, train // 100, 0)

    import torch

    torch.set_num_threads(1)
    megatron = import_megatron()
    rows: list[Row] = []
    with scratch_directory(options.dir, "bench_megatron_provider_", options.quick) as directory:
        prefixes = write_stores(directory, stores, options.docs, options.seed)
        weights = np.random.default_rng(options.seed).dirichlet(np.ones(stores))
        data_path = [str(x) for pair in zip(weights.tolist(), prefixes) for x in pair]
        caches = {side: os.path.join(directory, f"cache-{side}") for side in ("tokenport", "megatron")}
        ours_args = argparse.Namespace(
            data_path=data_path, split="98,2,0", seq_length=SEQ_LENGTH, seed=options.seed,
            data_cache_path=caches["tokenport"], create_attention_mask_in_dataloader=False,
        )  # fmt: skip
        their_args = argparse.Namespace(**{**vars(ours_args), "data_cache_path": caches["megatron"]})
        provider = datasets_provider(ours_args, tokenizer=types.SimpleNamespace(eod=EOD))
        group = tempfile.mktemp(prefix="gloo-", dir=directory)
        torch.distributed.init_process_group("gloo", init_method=f"file://{group}", rank=0, world_size=1)
        try:
            ours, theirs = provider(sizes), megatron_build(megatron, their_args, sizes)
            ids = np.random.default_rng(options.seed).integers(0, train, options.samples).tolist()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for i in ids[:200]:
                    a, b = ours[0][i], theirs[0][i]
                    assert all(torch.equal(a[k], v) for k, v in b.items() if k != "dataset_id"), i
            print(f"  {stores} stores x {options.docs:,} docs; sizes {sizes}; samples checked equal", flush=True)

            def clear(side: str):
                return lambda: shutil.rmtree(caches[side], ignore_errors=True)

            cold = best_of_each(
                [lambda: provider(sizes), lambda: megatron_build(megatron, their_args, sizes)],
                options.repeat,
                setups=[clear("tokenport"), clear("megatron")],
            )
            rows.append(
                Row("cold", f"{stores} stores, {train:,} samples", "s", *cold, "megatron-core", lower_is_better=True)
            )
            bare_ours = datasets_provider(
                argparse.Namespace(**{**vars(ours_args), "data_cache_path": None}),
                tokenizer=types.SimpleNamespace(eod=EOD),
            )
            bare_theirs = argparse.Namespace(**{**vars(their_args), "data_cache_path": None})

            def clear_megatron_default_cache():  # megatron-core saves GPT indices under PREFIX/cache when given no path
                for prefix in prefixes:
                    shutil.rmtree(os.path.join(prefix, "cache"), ignore_errors=True)

            bare = best_of_each(
                [lambda: bare_ours(sizes), lambda: megatron_build(megatron, bare_theirs, sizes)],
                options.repeat,
                setups=[None, clear_megatron_default_cache],
            )
            rows.append(
                Row(
                    "no cache dir",
                    f"{stores} stores, {train:,} samples",
                    "s",
                    *bare,
                    "megatron-core",
                    lower_is_better=True,
                )
            )
            warm = best_of_each(
                [lambda: provider(sizes), lambda: megatron_build(megatron, their_args, sizes)], options.repeat
            )
            rows.append(Row("warm", f"{stores} stores, cache hit", "s", *warm, "megatron-core", lower_is_better=True))
            ours_train, their_train = provider(sizes)[0], megatron_build(megatron, their_args, sizes)[0]

            def reads(dataset):
                def run():
                    for i in ids:
                        dataset[i]

                return run

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                read = best_of_each([reads(ours_train), reads(their_train)], options.repeat)
            per_sample = [t / len(ids) for t in read]
            rows.append(
                Row(
                    "samples",
                    f"ds[i], seq {SEQ_LENGTH}",
                    "s/sample",
                    *per_sample,
                    "megatron-core",
                    lower_is_better=True,
                )
            )
        finally:
            torch.distributed.destroy_process_group()
    print_table(rows)
    print_goals(rows)


if __name__ == "__main__":
    main()
