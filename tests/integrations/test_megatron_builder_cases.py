"""megatron-core 0.16's own builder cases (tests/unit_tests/data/test_builder.py, ``test_fast_builder``) through the
Megatron-LM provider: each of its 144 configurations built by megatron-core's BlendedMegatronDatasetBuilder and by
tokenport's provider from the same Megatron-LM arguments, sample for sample and index for index.

The configurations, inputs and sizes are megatron's (10 stores of 10 documents of 50..100 random tokens written by
megatron-core's IndexedDatasetBuilder, a legacy Null tokenizer of 131,072 or 20,000 ids, sequence length 5, sizes
(100, 10, 10), split "70,20,10" or per-split paths with random integer weights 10..100, surplus 0.005, 0.01 or 0);
the test code is ours. megatron's fast-cache, deferred-mmap and sequences-per-dataset variants change no sample:
here they are the flags the provider reads from ``args`` and ignores.
"""

from __future__ import annotations

import argparse
import itertools
import random
import warnings

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents
from tokenport.integrations.megatron import MegatronSamples, datasets_provider

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core.datasets.gpt_dataset")

from megatron.core.datasets.blended_dataset import BlendedDataset  # noqa: E402  (after the skips)
from megatron.core.datasets.gpt_dataset import GPTDataset  # noqa: E402
from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder  # noqa: E402

from tests.integrations.megatron_support import (  # noqa: E402
    EOD,
    TOKENIZER,
    LegacyNullTokenizer,
    assert_same_samples,
    megatron_args,
    megatron_datasets,
)

SEQUENCE_LENGTH = 5
NUMBER_OF_FILES = 10
NUMBER_OF_DOCUMENTS = 10
SIZES = (100, 10, 10)

# megatron's parametrization, in its order; use_split with fast_cache_load is skipped there
CASES = [
    case
    for case in itertools.product(
        (True, False),  # use_split
        (True, False),  # add_weights
        (True, False),  # fast_cache_load
        (True, False),  # sequences_per_dataset
        (True, False),  # defer_npy_index_mmap
        (131072, 20000),  # vocab_size
        (0.005, 0.01, 0),  # mid_level_dataset_surplus
    )
    if not (case[0] and case[2])
]
assert len(CASES) == 144


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """vocab_size -> (its legacy Null tokenizer, 10 store prefixes), written as megatron's test writes them;
    "cache" -> a directory for the provider's index caches."""
    made = {}
    for vocab_size in (131072, 20000):
        tokenizer = LegacyNullTokenizer(vocab_size)
        directory = tmp_path_factory.mktemp(f"megatron_cases_{vocab_size}")
        rng = random.Random(vocab_size)
        prefixes = []
        for i in range(NUMBER_OF_FILES):
            prefix = str(directory / f"file_{i}")
            builder = IndexedDatasetBuilder(prefix + ".bin", dtype=DType.optimal_dtype(tokenizer.vocab_size))
            for _ in range(rng.randint(10, NUMBER_OF_DOCUMENTS)):
                document = [rng.randint(0, tokenizer.vocab_size - 1) for _ in range(rng.randint(50, 100))]
                builder.add_document(document, [len(document)])
            builder.finalize(prefix + ".idx")
            prefixes.append(prefix)
        made[vocab_size] = (tokenizer, prefixes)
    made["cache"] = tmp_path_factory.mktemp("megatron_cases_cache")
    return made


def case_args(prefixes, use_split, add_weights, surplus, **flags) -> argparse.Namespace:
    """Megatron-LM's arguments for one configuration (megatron's data mixture, weights drawn after seeding 1234)."""
    args = megatron_args(
        seed=1234,
        seq_length=SEQUENCE_LENGTH,
        create_attention_mask_in_dataloader=False,
        mid_level_dataset_surplus=surplus,
        **flags,
    )
    if use_split:
        args.data_path, args.split = list(prefixes), "70,20,10"
        return args
    rng = random.Random(1234)
    paths = [prefixes[0:6], prefixes[6:9], prefixes[9:10]]
    if add_weights:  # integers, as megatron's test gives them: not strings
        paths = [[x for prefix in part for x in (rng.randint(10, 100), prefix)] for part in paths]
    args.train_data_path, args.valid_data_path, args.test_data_path = paths
    return args


_MEGATRON: dict[tuple, tuple] = {}


def megatron_reference(corpora, use_split, add_weights, vocab_size, surplus):
    """megatron-core's datasets for a configuration (its other flags change no sample: built once per data)."""
    key = (use_split, add_weights, vocab_size, surplus)
    if key not in _MEGATRON:
        tokenizer, prefixes = corpora[vocab_size]
        args = case_args(prefixes, use_split, add_weights, surplus)
        _MEGATRON[key] = megatron_datasets(args, SIZES, tokenizer)
    return _MEGATRON[key]


def assert_same_indices(ours: MegatronSamples, theirs) -> None:
    """megatron's own checks of a build: the first and last samples, and every index array, equal."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for idx in (0, -1, -len(theirs)):
            assert torch.equal(ours[idx]["tokens"], theirs[idx]["tokens"]), idx
    mine = ours.dataset
    if isinstance(theirs, GPTDataset):
        pairs = [(mine, theirs)]
    else:
        assert isinstance(theirs, BlendedDataset)
        np.testing.assert_array_equal(mine.dataset_index, theirs.dataset_index)
        np.testing.assert_array_equal(mine.dataset_sample_index, theirs.dataset_sample_index)
        assert len(mine.datasets) == len(theirs.datasets)
        pairs = list(zip(mine.datasets, theirs.datasets))
    for child, peer in pairs:
        assert len(child) == len(peer)
        np.testing.assert_array_equal(child.document_index, peer.document_index)
        np.testing.assert_array_equal(child.sample_index, peer.sample_index)
        np.testing.assert_array_equal(child.shuffle_index, peer.shuffle_index)
        np.testing.assert_array_equal(child.dataset.sequence_lengths, peer.dataset.index.sequence_lengths)
        np.testing.assert_array_equal(child.dataset.document_indices, peer.dataset.index.document_indices)
        np.testing.assert_array_equal(child.dataset.sequence_pointers, peer.dataset.index.sequence_pointers)


@pytest.mark.parametrize(
    "use_split, add_weights, fast_cache_load, sequences_per_dataset, defer_npy_index_mmap, vocab_size, surplus",
    CASES,
)
def test_fast_builder_configuration_equals_megatron_core(
    corpora,
    tmp_path,
    use_split,
    add_weights,
    fast_cache_load,
    sequences_per_dataset,
    defer_npy_index_mmap,
    vocab_size,
    surplus,
):
    tokenizer, prefixes = corpora[vocab_size]
    theirs = megatron_reference(corpora, use_split, add_weights, vocab_size, surplus)
    args = case_args(
        prefixes,
        use_split,
        add_weights,
        surplus,
        # one cache per data: the first of the six flag variants builds, the others load (megatron's fast path)
        data_cache_path=str(corpora["cache"] / f"{use_split}-{add_weights}-{vocab_size}-{surplus}"),
        dataloader_fast_cache_load=fast_cache_load,
        dataloader_defer_npy_index_mmap=defer_npy_index_mmap,
        per_dataset_sequences_path=str(tmp_path / "sequences_per_dataset.json") if sequences_per_dataset else None,
    )
    ours = datasets_provider(args, tokenizer=tokenizer)(SIZES)
    assert_same_samples(ours, theirs)
    for mine, peer in zip(ours, theirs):
        if peer is not None:
            assert_same_indices(mine, peer)


# -- test_builder's configurations (its blends of 10 stores weighted 1..10 or by size, per split or shared) --

NUM_DATASETS = 10


@pytest.fixture(scope="module")
def ten_stores(tmp_path_factory) -> dict[str, list[str]]:
    """Per split name, 10 stores growing with their index (megatron's test sizes its datasets i + 1 times);
    "wide": 10 stores with enough documents that 990,9,1 leaves each split one (megatron-core loops forever
    on a split of no document, where tokenport refuses it)."""
    directory = tmp_path_factory.mktemp("megatron_builder_stores")
    rng = np.random.default_rng(10)
    stores: dict[str, list[str]] = {}
    for which, base in (("train", 12), ("valid", 4), ("test", 2), ("wide", 1000)):
        stores[which] = []
        count, length = (base, (4, 12)) if which == "wide" else (None, (8, 40))
        for i in range(NUM_DATASETS):
            documents = random_documents(rng, count or base * (i + 1), tokens=(3, 500), length=length, eod=EOD)
            stores[which].append(build_store(directory / f"{which}{i}", documents, dtype=np.uint16))
    return stores


def _weighted(prefixes: list[str]) -> list:
    """megatron's test blend: weights 1..10 as integers, zipped with the prefixes."""
    return [x for weight, prefix in zip(range(1, len(prefixes) + 1), prefixes) for x in (weight, prefix)]


BUILDER_CASES = {
    # name: (flags, sizes) — flags name stores as ("train"|"valid"|"test", weighted?)
    "lone_store_per_split": ({"train_data_path": ("train", "lone")}, (1000, 0, 0)),
    "by_size_per_split": (
        {"train_data_path": ("train", False), "valid_data_path": ("valid", False), "test_data_path": ("test", False)},
        (1000, 1000, 1000),
    ),
    "by_size_train_only": ({"train_data_path": ("train", False)}, (1000, 0, 0)),
    "weighted_train_only": ({"train_data_path": ("train", True)}, (1000, 0, 0)),  # once failed without a buffer
    "by_size_shared_100_0_0": ({"data_path": ("train", False), "split": "100,0,0"}, (400, 0, 0)),
    "by_size_shared_50_50_0": ({"data_path": ("train", False), "split": "50,50,0"}, (1000, 0, 0)),
    "by_size_shared_quarter_and_whole": ({"data_path": ("train", False), "split": "50,50,0"}, (250, 1000, 0)),
    "weighted_shared_990_9_1": ({"data_path": ("wide", True), "split": "990,9,1"}, (20000, 1000, 1)),
}


@pytest.mark.parametrize("name", sorted(BUILDER_CASES))
def test_builder_configuration_equals_megatron_core(ten_stores, name):
    flags, sizes = BUILDER_CASES[name]
    args = {}
    for flag, value in flags.items():
        if flag == "split":
            args[flag] = value
            continue
        which, weighted = value
        prefixes = ten_stores[which]
        args[flag] = [prefixes[0]] if weighted == "lone" else _weighted(prefixes) if weighted else list(prefixes)
    args = megatron_args(seq_length=10, **args)
    ours = datasets_provider(args, tokenizer=TOKENIZER)(sizes)
    theirs = [None if size == 0 else peer for size, peer in zip(sizes, megatron_datasets(args, sizes))]
    for mine, peer in zip(ours, theirs):
        assert (mine is None) == (peer is None)
        if peer is not None:
            assert len(mine) == len(peer)
            assert_same_indices(mine, peer)
            _assert_same_head(mine, peer)


def _assert_same_head(mine: MegatronSamples, peer, count: int = 300) -> None:
    """The first ``count`` samples equal, key for key (all of them for assert_same_samples is slow at 20,000)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(min(count, len(peer))):
            a, b = mine[i], peer[i]
            assert list(a) == list(b), i
            for key, value in b.items():
                assert torch.equal(torch.as_tensor(a[key]), torch.as_tensor(value)), (i, key)


def test_weights_without_sizes_are_refused_as_megatron_core_refuses_them(ten_stores):
    """test_builder's first build: a weighted blend asked for no size (None) fails megatron-core's assert."""
    args = megatron_args(seq_length=10, train_data_path=_weighted(ten_stores["train"]))
    sizes = (None, None, None)
    with pytest.raises(AssertionError):
        megatron_datasets(args, sizes)
    with pytest.raises(tp.ConfigError, match="the train blend has weights but no size"):
        datasets_provider(args, tokenizer=TOKENIZER)(sizes)
