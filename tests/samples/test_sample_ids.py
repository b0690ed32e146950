"""Hostile sample ids: only integers in range are ids; anything else is a SampleIdError, never truncated or parsed."""

from __future__ import annotations

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents
from tokenport.blend.dataset import BlendedDataset
from tokenport.errors import ConfigError, SampleIdError, TokenportError
from tokenport.samples.gpt import GPTDataset, GPTSampleConfig
from tokenport.samples.packed import PackedDataset
from tokenport.sampling.progress import dataset_epochs

EOD = 2

BAD_BATCHES = [
    ("float", [1.5]),
    ("float array", np.array([0.9, 2.2])),
    ("2-d", np.array([[0, 1], [2, 3]])),
    ("string", "ab"),
    ("strings", ["1"]),
    ("None", None),
    ("bools", [True, False]),
    ("bool array", np.array([True])),
    ("nan", [float("nan")]),
    ("inf", [float("inf")]),
    ("objects", [object()]),
    ("complex", [1j]),
    ("ragged", [[1], [1, 2]]),
    ("2**63", [2**63]),
    ("2**64", [2**64]),
    ("uint64 max", np.array([2**64 - 1], dtype=np.uint64)),
    ("negative", [-1]),
    ("past the end", [10**6]),
]
BAD_IDS = [1.0, np.float64(1), True, np.True_, "1", None, -1, 2**70, 10**6]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """A GPT, a packed and a blended dataset over one small store."""
    prefix = str(tmp_path_factory.mktemp("sample_ids") / "store")
    documents = random_documents(np.random.default_rng(0), 30, tokens=(3, 100), length=(1, 40), eod=EOD)
    store = tp.IndexedDataset(build_store(prefix, documents, dtype=np.uint16))
    gpt = GPTDataset(store, np.arange(30), 20, GPTSampleConfig(8, eod_id=EOD), 1)
    packed = PackedDataset(store, 32, split_long=True, seed=1)
    blend = BlendedDataset([gpt, gpt], [1.0, 2.0], 30)
    return {"gpt": gpt, "packed": packed, "blend": blend}


@pytest.mark.parametrize("kind", ["gpt", "packed", "blend"])
@pytest.mark.parametrize(("label", "ids"), BAD_BATCHES, ids=[label for label, _ in BAD_BATCHES])
def test_get_batch_and_read_plan_refuse_what_is_not_an_id(datasets, kind, label, ids):
    """Floats were truncated (1.5 read sample 1), bools and "1" taken as ids, 2-D flattened, uint64 wrapped."""
    ds = datasets[kind]
    for call in (ds.get_batch, ds.read_plan):
        with pytest.raises(SampleIdError) as caught:
            call(ids)
        assert isinstance(caught.value, TokenportError) and isinstance(caught.value, IndexError)


@pytest.mark.parametrize("kind", ["gpt", "packed", "blend"])
@pytest.mark.parametrize("idx", BAD_IDS, ids=repr)
def test_getitem_and_lineage_refuse_what_is_not_an_id(datasets, kind, idx):
    """ds[1.0], ds["1"], ds[None] raised a bare TypeError; ds[True] read sample 1."""
    ds = datasets[kind]
    for call in (ds.__getitem__, ds.lineage):
        with pytest.raises(SampleIdError):
            call(idx)


@pytest.mark.parametrize("kind", ["gpt", "packed", "blend"])
def test_integer_ids_of_every_kind_still_read(datasets, kind):
    """Python and numpy ints, int arrays of any width, a scalar (a batch of one) and no ids at all."""
    ds = datasets[kind]
    expected = ds.get_batch([0, 1])
    for ids in ([0, 1], np.array([0, 1], np.uint8), np.array([0, 1], np.int32), [np.int64(0), 1], (0, 1)):
        batch = ds.get_batch(ids)
        for name, value in expected.items():
            assert np.array_equal(batch[name], value), name
    assert len(ds.get_batch(np.int64(1))[next(iter(expected))]) == 1
    assert len(ds.get_batch([])[next(iter(expected))]) == 0
    assert ds[np.int32(1)].keys() == ds[1].keys()
    # the sequence protocol still stops at the end: SampleIdError is an IndexError
    assert len(list(ds)) == len(ds)


def test_dataset_epochs_refuses_ids_outside_the_dataset(datasets):
    """Consumed ids past the end were counted as samples; float ids truncated."""
    blend = datasets["blend"]
    for ids in ([len(blend)], [0.5], [[0, 1]]):
        with pytest.raises(ConfigError):
            dataset_epochs(blend, [ids])
