"""A worker's batches reach the loop through reused shared slots: each arrives whole, and a batch the
caller keeps keeps its values while later batches go through the same slot."""

from __future__ import annotations

import gc
import io
import pickle
import random
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents
from tokenport.integrations import StatefulLoader, _handoff
from tokenport.sampling import RandomSampler

torch = pytest.importorskip("torch.multiprocessing")  # torch's reductions: storages pickled as descriptors
torch = pytest.importorskip("torch")

torch.set_num_threads(1)


@pytest.fixture
def fresh(monkeypatch):
    """A fresh slot pool and map of slots for the test (this process plays both the worker and the loop)."""
    monkeypatch.setattr(_handoff, "_POOL", None)
    monkeypatch.setattr(_handoff, "_MAPPED", {})


def _batch(rng: random.Random, rows: int) -> dict:
    """A batch of distinct values: int64 tokens, int32 positions, float32 mask, a 0-d count."""
    seed = rng.randrange(1 << 30)
    base = torch.arange(rows * 5, dtype=torch.int64).view(rows, 5) + seed
    return {"tokens": base, "pos": (base % 97).int(), "mask": (base % 3).float(), "count": torch.tensor(rows)}


def _send(parcel) -> bytes:
    """The parcel pickled as a worker's queue pickles it (storages through file descriptors)."""
    buffer = io.BytesIO()
    ForkingPickler(buffer, pickle.HIGHEST_PROTOCOL).dump(parcel)
    return buffer.getvalue()


def _same(batch: dict, expected: dict) -> bool:
    return list(batch) == list(expected) and all(
        batch[k].dtype == v.dtype and batch[k].shape == v.shape and torch.equal(batch[k], v)
        for k, v in expected.items()
    )


def test_a_slot_is_sent_once_then_reused_and_a_kept_batch_keeps_its_values(fresh):
    rng = random.Random(0)
    first, second = _batch(rng, 4), _batch(rng, 4)
    parcel = _handoff.SharedBatch.pack(first)
    assert parcel.key is not None and parcel.buffer is not None  # the slot's descriptor crosses once
    kept = pickle.loads(_send(parcel)).unpack()
    again = _handoff.SharedBatch.pack(second)
    assert again.key == parcel.key and again.buffer is None  # the same slot, mapped already
    assert _same(pickle.loads(_send(again)).unpack(), second)
    assert _same(kept, first)  # written over in the slot, not in the batch kept
    assert len(_handoff.pool().slots) == 1


def test_busy_slots_are_never_written_and_a_full_pool_sends_fresh_buffers(fresh):
    rng = random.Random(1)
    batches = [_batch(rng, 3) for _ in range(_handoff.SLOTS + 2)]
    parcels = [_handoff.SharedBatch.pack(b) for b in batches]  # none received yet: every slot stays busy
    keys = [p.key for p in parcels]
    assert len(set(keys[: _handoff.SLOTS])) == _handoff.SLOTS and keys[_handoff.SLOTS :] == [None, None]
    for parcel, batch in zip(parcels, batches):
        assert _same(pickle.loads(_send(parcel)).unpack(), batch)


def test_a_bigger_batch_replaces_a_free_slot_too_small(fresh, monkeypatch):
    monkeypatch.setattr(_handoff, "SLOTS", 1)
    rng = random.Random(2)
    small, big = _batch(rng, 2), _batch(rng, 2000)
    kept = pickle.loads(_send(_handoff.SharedBatch.pack(small))).unpack()
    parcel = _handoff.SharedBatch.pack(big)
    assert parcel.key == (_handoff.pool().pid, 0) and parcel.buffer is not None  # a new slot in its place
    assert _same(pickle.loads(_send(parcel)).unpack(), big) and _same(kept, small)


def test_random_sends_and_arrivals_in_any_order_keep_every_batch(fresh):
    rng = random.Random(3)
    in_flight: list[tuple] = []  # (bytes sent, the batch it holds)
    kept: list[tuple] = []  # (batch received and kept, the batch expected)
    for _ in range(300):
        if in_flight and rng.random() < 0.5:
            data, expected = in_flight.pop(rng.randrange(len(in_flight)))
            kept.append((pickle.loads(data).unpack(), expected))
        else:
            batch = _batch(rng, rng.choice((1, 4, 8, 64)))
            in_flight.append((_send(_handoff.SharedBatch.pack(batch)), batch))
        assert all(_same(batch, expected) for batch, expected in kept)
        busy = sum(int(flag[0]) for _, flag in _handoff.pool().slots)
        assert busy <= len(in_flight)  # a received batch always frees its slot


def _gpt(tmp_path) -> tp.GPTDataset:
    documents = random_documents(np.random.default_rng(5), 60, tokens=(3, 1000), length=(5, 80), eod=2)
    store = tp.IndexedDataset(build_store(tmp_path / "s", documents, dtype=np.uint16))
    return tp.GPTDataset(store, np.arange(60), 120, tp.GPTSampleConfig(16, 2), 1)


class _CountingMap(dict):
    """The loop's map of slots, counting the slots mapped (a worker's pickled batch names the real function)."""

    mapped = 0

    def __setitem__(self, key, value) -> None:
        type(self).mapped += 1
        super().__setitem__(key, value)


def test_batches_kept_from_workers_equal_the_in_process_ones_and_their_slots_are_unmapped(tmp_path, monkeypatch):
    dataset = _gpt(tmp_path)
    mapped = _CountingMap()
    monkeypatch.setattr(_handoff, "_MAPPED", mapped)

    def loader(**options) -> StatefulLoader:
        return StatefulLoader(dataset, RandomSampler(len(dataset), 0, 2, 0, 1, seed=7), **options)

    expected = list(loader())
    kept = list(loader(num_workers=2))  # every batch kept while later ones come through the same slots
    assert len(kept) == len(expected) > 4 * _handoff.SLOTS  # more batches than both workers have slots
    assert all(_same(batch, reference) for batch, reference in zip(kept, expected))
    assert 2 <= mapped.mapped <= 2 * _handoff.SLOTS  # each worker's slots mapped once, then reused
    assert not mapped  # the workers exited with the loop: their slots are unmapped


def test_a_loop_left_early_unmaps_its_slots_and_the_next_loop_resumes_on_the_same_batches(tmp_path, monkeypatch):
    dataset = _gpt(tmp_path)
    monkeypatch.setattr(_handoff, "_MAPPED", {})
    sampler = RandomSampler(len(dataset), 0, 2, 0, 1, seed=7)
    loader = StatefulLoader(dataset, sampler, num_workers=2)
    reference = list(StatefulLoader(dataset, RandomSampler(len(dataset), 0, 2, 0, 1, seed=7)))
    batches = iter(loader)
    first = [next(batches) for _ in range(5)]
    state = loader.state_dict()
    del batches  # left after 5 batches: torch stops the workers, then their slots are unmapped
    gc.collect()
    assert not _handoff._MAPPED
    rest = list(loader)  # the next loop starts after the 5 handed over
    assert loader.state_dict() != state
    assert all(_same(batch, expected) for batch, expected in zip(first + rest, reference))
    assert len(first + rest) == len(reference)
