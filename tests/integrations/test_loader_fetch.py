"""StatefulLoader's batch path: one get_batch per micro-batch, equal to torch's default collate of the samples."""

from __future__ import annotations

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents
from tokenport.integrations import StatefulLoader
from tokenport.sampling import RandomSampler

torch = pytest.importorskip("torch")
from torch.utils.data import default_collate  # noqa: E402

torch.set_num_threads(1)


def _store(path, seed: int) -> tp.IndexedDataset:
    documents = random_documents(np.random.default_rng(seed), 60, tokens=(3, 1000), length=(5, 80), eod=2)
    return tp.IndexedDataset(build_store(path, documents, dtype=np.uint16))


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fetch")
    return [_store(directory / f"s{k}", k) for k in range(2)]


def _gpt(store, seed: int = 1, **config) -> tp.GPTDataset:
    return tp.GPTDataset(store, np.arange(60), 40, tp.GPTSampleConfig(16, 2, **config), seed)


def _datasets(stores) -> dict:
    return {
        "gpt": _gpt(stores[0]),
        "gpt with attention mask": _gpt(stores[0], create_attention_mask=True),
        "blend of gpt": tp.BlendedDataset([_gpt(s, k) for k, s in enumerate(stores)], [0.3, 0.7], 50),
        "packed": tp.PackedDataset(stores[0], 100, seed=3),
        "blend of packed": tp.BlendedDataset(  # one cu_seqlens width: each one's own (4 and 5) cannot be stacked
            [tp.PackedDataset(s, 100, seed=k, cu_seqlens_length=8) for k, s in enumerate(stores)], None, None
        ),
    }


def _loader(dataset, **options) -> StatefulLoader:
    return StatefulLoader(dataset, RandomSampler(len(dataset), 0, 4, 0, 1, seed=7), **options)


def _assert_same(ours: list[dict], reference: list[dict]) -> None:
    assert len(ours) == len(reference) > 0
    for batch, expected in zip(ours, reference):
        assert list(batch) == list(expected)  # the same keys in the same order
        for name, value in expected.items():
            assert batch[name].dtype == value.dtype and batch[name].shape == value.shape, name
            assert torch.equal(batch[name], value), name


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["gpt", "gpt with attention mask", "blend of gpt", "packed", "blend of packed"])
def test_batch_path_equals_the_default_collate_of_the_samples(stores, kind, workers, monkeypatch):
    dataset = _datasets(stores)[kind]
    options = dict(num_workers=workers) if workers else {}
    reference = list(_loader(dataset, collate_fn=default_collate, **options))  # a collate_fn: sample by sample
    calls = _count_calls(monkeypatch, type(dataset), "get_batch")
    _assert_same(list(_loader(dataset, **options)), reference)
    batches = 0 if workers else len(reference)  # with workers the calls happen in their processes
    assert batches < len(calls) <= batches + 2  # + 1 or 2: the check of sample 0 (packed's [0] is a get_batch)
    names = ("labels", "tokens")
    trimmed = [{name: batch[name] for name in names} for batch in reference]
    _assert_same(list(_loader(dataset, fields=names, **options)), trimmed)


def _count_calls(monkeypatch, cls, name: str) -> list[int]:
    """Count calls of ``cls.name`` (the real method still runs)."""
    calls: list[int] = []
    real = getattr(cls, name)

    def counted(self, *args):
        calls.append(1)
        return real(self, *args)

    monkeypatch.setattr(cls, name, counted)
    return calls


def test_one_get_batch_call_per_micro_batch(stores, monkeypatch):
    dataset = _gpt(stores[0])
    loader = _loader(dataset)
    batches = _count_calls(monkeypatch, tp.GPTDataset, "get_batch")
    samples = _count_calls(monkeypatch, tp.GPTDataset, "__getitem__")
    list(loader)  # the first loop also checks sample 0 against get_batch([0]), once per dataset
    batches.clear()
    samples.clear()
    count = len(list(loader))
    assert count == len(dataset) // 4 and len(batches) == count and not samples
    batches.clear()
    list(_loader(dataset, collate_fn=default_collate))
    assert not batches and len(samples) == count * 4  # a collate_fn keeps the per-sample path


def test_children_with_other_fields_keep_the_per_sample_path(stores, monkeypatch):
    # a blend of a GPT and a packed dataset: their samples hold different fields, one get_batch would mix them
    mixed = tp.BlendedDataset([_gpt(stores[0]), tp.PackedDataset(stores[1], 100)], [0.5, 0.5], 40)
    # packed datasets whose cu_seqlens differ in width: a batch of both cannot be stacked either way
    widths = tp.BlendedDataset(
        [tp.PackedDataset(s, 100, cu_seqlens_length=w) for s, w in zip(stores, (8, 9))], [0.5, 0.5], 40
    )
    calls = _count_calls(monkeypatch, tp.BlendedDataset, "get_batch")
    for dataset in (mixed, widths):
        with pytest.raises((KeyError, RuntimeError)):  # what torch's default collate says of such samples
            list(_loader(dataset))
    assert not calls


class _Tuples:
    def __len__(self) -> int:
        return 8

    def __getitem__(self, idx: int):
        return (idx, idx)


class _Dicts(_Tuples):
    def __getitem__(self, idx: int):
        return {"id": np.int64(idx), "twice": np.int64(2 * idx)}


def test_fields_are_checked_and_apply_sample_by_sample_too(stores):
    dataset = _gpt(stores[0])
    with pytest.raises(tp.ConfigError, match=r"fields: loss_mak not among .*tokens, labels, loss_mask"):
        _loader(dataset, fields=("tokens", "loss_mak"))
    for bad, message in (
        (("tokens", "tokens"), "more than once"),
        ("tokens", "tuple of field names"),
        ((), "name at least"),
    ):
        with pytest.raises(tp.ConfigError, match=message):
            _loader(dataset, fields=bad)
    with pytest.raises(tp.ConfigError, match="not dicts"):
        _loader(_Tuples(), fields=("id",))
    with pytest.raises(tp.ConfigError, match="ids not among .*id, twice"):
        _loader(_Dicts(), fields=("ids",))
    batches = list(_loader(_Dicts(), fields=("twice",)))  # no get_batch: per sample, trimmed before collate
    assert [list(b) for b in batches] == [["twice"]] * 2
    assert sorted(torch.cat([b["twice"] for b in batches]).tolist()) == list(range(0, 16, 2))
    seen = []
    list(_loader(dataset, fields=("max_seqlen",), collate_fn=lambda samples: seen.extend(samples) or samples))
    assert seen and all(list(sample) == ["max_seqlen"] for sample in seen)  # a collate_fn gets trimmed samples


def _storages(batch: dict) -> set[int]:
    return {tensor.untyped_storage().data_ptr() for tensor in batch.values()}


def test_a_workers_batch_arrives_as_one_shared_buffer_unless_a_collate_fn_is_given(stores):
    dataset = _gpt(stores[0])
    for loader in (_loader(dataset, num_workers=2), _loader(_Dicts(), num_workers=2)):  # batch path, per sample
        batches = list(loader)
        assert batches and all(len(_storages(batch)) == 1 for batch in batches)
        assert len({storage for batch in batches for storage in _storages(batch)}) == len(batches)  # each its own
    collated = list(_loader(dataset, num_workers=2, collate_fn=default_collate))
    assert all(len(_storages(batch)) == len(batch) for batch in collated)  # the caller's collate: untouched


@pytest.mark.skipif(not torch.accelerator.is_available(), reason="pinned memory needs an accelerator")
def test_pinned_batches_equal_the_unpinned(stores):
    dataset = _gpt(stores[0])
    pinned = list(_loader(dataset, num_workers=2, pin_memory=True))
    assert all(tensor.is_pinned() for batch in pinned for tensor in batch.values())
    _assert_same(pinned, list(_loader(dataset, num_workers=2)))
