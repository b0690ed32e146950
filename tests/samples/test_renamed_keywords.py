"""One spelling across the house (DESIGN.md's names table): each old keyword still works for one release with
a DeprecationWarning naming the new spelling, gives the same dataset, and passing both is a ConfigError."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents
from tokenport.integrations import StatefulLoader, data_receipt, rebuild_dataset

EOD = 0


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    documents = random_documents(np.random.default_rng(3), 50, tokens=(1, 1000), length=(2, 60), append=EOD)
    return tp.IndexedDataset(build_store(tmp_path_factory.mktemp("names") / "store", documents, dtype=np.uint16))


def _same(a, b) -> None:
    assert data_receipt(a).dataset == data_receipt(b).dataset
    for name, value in a.get_batch(np.arange(len(a))).items():
        np.testing.assert_array_equal(value, b.get_batch(np.arange(len(b)))[name])


def _new_spelling(call, new: str):
    """The result of ``call`` with an old keyword, checking its DeprecationWarning names ``new``."""
    with pytest.warns(DeprecationWarning, match=new) as caught:
        result = call()
    assert all(w.filename == __file__ for w in caught if issubclass(w.category, DeprecationWarning))
    return result


def test_gpt_dataset_takes_store(store):
    config = tp.GPTSampleConfig(16, eod_id=EOD)
    new = tp.GPTDataset(store=store, indices=np.arange(40), num_samples=30, config=config, seed=1)
    old = _new_spelling(
        lambda: tp.GPTDataset(dataset=store, indices=np.arange(40), num_samples=30, config=config, seed=1), "store="
    )
    _same(old, new)
    assert new.store is store and new.dataset is store
    for both in (
        lambda: tp.GPTDataset(store, np.arange(40), 30, config, 1, dataset=store),
        lambda: tp.GPTDataset(store=store, dataset=store, indices=np.arange(40), num_samples=30, config=config, seed=1),
    ):
        with pytest.raises(tp.ConfigError, match=r"dataset= is the old spelling of store="):
            both()


def test_packed_dataset_takes_seq_length_too_long_and_seed(store):
    new = tp.PackedDataset(store, seq_length=48, too_long="split", seed=None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = tp.PackedDataset(store, capacity=48, split_long=True, shuffle=False)
    messages = " | ".join(str(w.message) for w in caught if issubclass(w.category, DeprecationWarning))
    assert "seq_length=" in messages and 'too_long="split"' in messages and "seed=None" in messages
    _same(old, new)
    assert (new.seq_length, new.capacity, new.too_long, new.shuffle) == (48, 48, "split", False)
    _same(
        _new_spelling(lambda: tp.PackedDataset(store, 48, split_long=True, shuffle=True, seed=4), "seed=None"),
        tp.PackedDataset(store, 48, too_long="split", seed=4),
    )
    with pytest.raises(tp.ConfigError, match=r"capacity= is the old spelling of seq_length="):
        tp.PackedDataset(store, 48, capacity=48)
    with pytest.raises(tp.ConfigError, match=r"split_long=True is the old spelling of too_long=\"split\""):
        tp.PackedDataset(store, 48, too_long="split", split_long=True)
    with pytest.raises(tp.ConfigError, match="too_long="):
        tp.PackedDataset(store, 48, too_long="truncate")
    with pytest.raises(tp.ConfigError, match=r"pass too_long='split' \(formerly split_long=True\) or raise seq_length"):
        tp.PackedDataset(store, 8)


def test_an_unshuffled_packed_dataset_keeps_its_receipt_and_rebuilds(store):
    """A receipt of shuffle=False with a seed records that seed; rebuilding it (now with seed=None) keeps it."""
    with pytest.warns(DeprecationWarning):
        old = tp.PackedDataset(store, 48, split_long=True, shuffle=False, seed=5)
    receipt = data_receipt(old)
    assert receipt.dataset["seed"] == 5 and receipt.dataset["build"]["shuffle"] is False
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # tokenport's own callers use the new names
        rebuilt = rebuild_dataset(receipt)
    _same(rebuilt, old)
    assert data_receipt(tp.PackedDataset(store, 48, too_long="split", seed=None)).dataset["seed"] == 0


def test_blended_dataset_takes_num_samples(store):
    children = [tp.PackedDataset(store, 48, too_long="split", seed=s) for s in (1, 2)]
    new = tp.BlendedDataset(children, [0.5, 0.5], num_samples=30)
    old = _new_spelling(lambda: tp.BlendedDataset(children, [0.5, 0.5], size=30), "num_samples=")
    _same(old, new)
    assert new.recipe["size"] == 30  # the receipt's key is unchanged
    with pytest.raises(tp.ConfigError, match="size= is the old spelling of num_samples="):
        tp.BlendedDataset(children, [0.5, 0.5], 30, size=30)


def test_trace_takes_data_parallel_rank(store):
    packed = tp.PackedDataset(store, 48, too_long="split", seed=2)
    loaders = [
        StatefulLoader.for_dataset(packed, micro_batch_size=2, seed=1, data_parallel_rank=r, data_parallel_size=2)
        for r in range(2)
    ]
    for loader in loaders:
        next(iter(loader))
    state = loaders[0].state_dict()
    new = tp.trace(state, 0, data_parallel_rank=1)
    assert _new_spelling(lambda: tp.trace(state, 0, rank=1), "data_parallel_rank=") == new
    assert [t.rank for t in new] == [1, 1]
    with pytest.raises(tp.ConfigError, match="rank= is the old spelling of data_parallel_rank="):
        tp.trace(state, 0, 1, rank=1)
    with pytest.raises(tp.ConfigError, match=r"data_parallel_rank=2: the run had 2 data-parallel rank"):
        tp.trace(state, 0, data_parallel_rank=2)


def test_loaders_take_seed_none_for_the_id_order(store):
    from tokenport.sampling import PretrainingSampler, StreamSampler

    packed = tp.PackedDataset(store, 48, too_long="split", seed=2)
    new = StatefulLoader.for_dataset(packed, micro_batch_size=2, seed=None)
    old = _new_spelling(lambda: StatefulLoader.for_dataset(packed, micro_batch_size=2, shuffle=False), "seed=None")
    assert isinstance(new.sampler, PretrainingSampler) and isinstance(old.sampler, PretrainingSampler)
    assert new.state_dict() == old.state_dict()
    shuffled = _new_spelling(
        lambda: StatefulLoader.for_dataset(packed, micro_batch_size=2, shuffle=True, seed=3), "seed=None"
    )
    assert shuffled.state_dict() == StatefulLoader.for_dataset(packed, micro_batch_size=2, seed=3).state_dict()
    assert isinstance(shuffled.sampler, StreamSampler)
    for shuffle, seed, message in (
        (False, 4, "seed=4: shuffle=False"),
        (True, None, "shuffle=True asks"),
        ("no", 0, "shuffle="),
    ):
        with pytest.raises(tp.ConfigError, match=message), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            StatefulLoader.for_dataset(packed, micro_batch_size=2, shuffle=shuffle, seed=seed)
