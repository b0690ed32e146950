"""Properties over random inputs (hypothesis): the store format round trip, the blend's deviation
bound, and exact sampler resume, also on another data-parallel layout."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tokenport as tp
from tokenport.blend import build_blending_indices

megatron = pytest.importorskip("megatron.core.datasets.indexed_dataset")

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
INTEGER_DTYPES = (np.uint8, np.int8, np.int16, np.uint16, np.int32, np.int64)


@st.composite
def stores(draw):
    """(dtype, documents): each document a list of sequences (possibly empty) of in-range tokens."""
    dtype = np.dtype(draw(st.sampled_from(INTEGER_DTYPES)))
    info = np.iinfo(dtype)
    token = st.integers(max(int(info.min), -(2**40)), min(int(info.max), 2**40))
    sequence = st.lists(token, max_size=40)
    documents = draw(st.lists(st.lists(sequence, min_size=1, max_size=4), max_size=20))
    return dtype, documents


@SETTINGS
@given(stores())
def test_store_round_trip_through_every_reader(store):
    dtype, documents = store
    sequences = [np.array(s, dtype=dtype) for doc in documents for s in doc]
    boundaries = np.cumsum([0] + [len(doc) for doc in documents])
    with tempfile.TemporaryDirectory() as directory:
        prefix = Path(directory) / "store"
        with tp.IndexedDatasetWriter(prefix, dtype=dtype) as writer:
            for doc in documents[: len(documents) // 2]:  # both write paths: one document at a time...
                flat = np.concatenate([np.array(s, dtype=dtype) for s in doc])
                writer.add_document(flat, lengths=[len(s) for s in doc])
            rest = documents[len(documents) // 2 :]  # ...and many at once, grouped into documents
            if rest:
                flat = np.concatenate([np.array(s, dtype=dtype) for doc in rest for s in doc])
                writer.add_documents(flat, [len(s) for doc in rest for s in doc], [len(doc) for doc in rest])
        readers = [tp.IndexedDataset(prefix), tp.IndexedDataset(prefix, mode="pread")]
        if any(len(s) for s in sequences):  # megatron-core cannot memory-map an empty .bin
            readers.append(megatron.IndexedDataset(str(prefix)))
        for reader in readers:
            assert len(reader) == len(sequences)
            assert np.array_equal(reader.sequence_lengths, [len(s) for s in sequences])
            assert np.array_equal(reader.document_indices, boundaries)
            for i, expected in enumerate(sequences):
                assert reader[i].dtype == dtype
                assert np.array_equal(reader[i], expected)
        for reader in readers[:2]:
            reader.close()


@SETTINGS
@given(weights=st.lists(st.floats(0.01, 100.0), min_size=1, max_size=8), size=st.integers(1, 3000))
def test_blend_keeps_every_dataset_within_its_bound_at_every_prefix(weights, size):
    dataset_index, sample_index = build_blending_indices(np.array(weights), size)
    n = len(weights)
    assert len(dataset_index) == len(sample_index) == size
    assert int(dataset_index.max()) < n
    taken = np.zeros((size + 1, n), dtype=np.int64)
    taken[np.arange(1, size + 1), dataset_index.astype(np.int64)] = 1
    counts = np.cumsum(taken, axis=0)  # counts[t, i]: samples of i among the first t
    # each dataset's samples are numbered 0, 1, 2, ... in the order the blend takes them
    assert np.array_equal(sample_index, counts[np.arange(1, size + 1), dataset_index.astype(np.int64)] - 1)
    share = np.array(weights) / np.sum(weights)
    deviation = np.abs(counts - np.arange(size + 1)[:, None] * share).max()
    bound = 0.0 if n == 1 else 1 - 1 / (2 * n - 2)  # Tijdeman's, as tokenport.blend documents
    assert deviation <= bound + 1e-9 * size


def _global_batches(make, layout, state, epochs_left):
    """The global batches the ranks of ``layout`` (mbs, dp) yield from ``state``, ranks' parts joined."""
    mbs, dp = layout
    samplers = [make(mbs, rank, dp) for rank in range(dp)]
    out = []
    for sampler in samplers:
        if state is not None:
            sampler.load_state_dict(state)
    for _ in range(epochs_left):
        parts = [list(iter(sampler)) for sampler in samplers]
        assert len({len(p) for p in parts}) == 1  # every rank yields as many batches
        out += [sum(batch, []) for batch in zip(*parts)]
    return out, samplers[0]


@st.composite
def layouts(draw):
    """(total samples, global batch, the layout trained on, the layout resumed on)."""
    gbs = draw(st.sampled_from([1, 2, 4, 6, 8, 12]))
    divisors = [d for d in range(1, gbs + 1) if gbs % d == 0]
    dp, dp2 = draw(st.sampled_from(divisors)), draw(st.sampled_from(divisors))
    total = draw(st.integers(gbs, 12 * gbs + gbs - 1))
    return total, (gbs // dp, dp), (gbs // dp2, dp2)


@SETTINGS
@given(layouts(), st.sampled_from(["random", "random-unsharded", "sequential"]), st.integers(0, 3), st.data())
def test_sampler_resume_yields_exactly_the_rest(layout, kind, seed, data):
    total, first, second = layout

    def make(mbs, rank, dp):
        if kind == "sequential":
            return tp.PretrainingSampler(total, 0, mbs, rank, dp)
        return tp.RandomSampler(total, 0, mbs, rank, dp, seed=seed, data_sharding=kind == "random")

    epochs = 1 if kind == "sequential" else 2  # a random sampler runs epoch after epoch
    reference, _ = _global_batches(make, first, None, epochs)
    k = data.draw(st.integers(0, len(reference)), label="batches consumed before the checkpoint")
    samplers = [make(*first[:1], rank, first[1]) for rank in range(first[1])]
    iterators = [iter(s) for s in samplers]
    consumed = [[next(it) for it in iterators] for _ in range(min(k, len(reference) // epochs))]
    assert [sum(batch, []) for batch in consumed] == reference[: len(consumed)]
    state = samplers[0].state_dict()
    assert all(s.state_dict() == state for s in samplers)
    if kind == "sequential":
        rest, _ = _global_batches(make, second, state, 1)
    else:  # the rest of this epoch, then the next one
        rest, _ = _global_batches(make, second, state, 2 if len(consumed) < len(reference) // epochs else 1)
    assert rest == reference[len(consumed) :]
    assert (
        len(set(itertools.chain.from_iterable(reference[: len(reference) // epochs])))
        == len(reference) // epochs * first[0] * first[1]
    )  # an epoch takes each sample at most once
