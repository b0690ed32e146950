"""A saved signature index (save_index / index of the dedup steps) read through the typed schema layer:
a damaged identity file or key array is one ConfigError naming it, never a crash or a wrong comparison."""

from __future__ import annotations

import numpy as np
import pytest

import tokenport as tp
from tests._support.mutate import mutations
from tokenport.corpus.steps.dedup import _identity, load_index, save_index


@pytest.fixture(params=["exact_dedup", "minhash_dedup"])
def saved(tmp_path, request):
    identity = _identity(request.param, 14, 8, 5, 1)
    columns = 2 if request.param == "exact_dedup" else 14
    keys = np.arange(5 * columns, dtype=np.uint64).reshape(5, columns)
    path = str(tmp_path / "index")
    save_index(path, identity, keys)
    return path, identity, keys


def test_a_saved_index_reads_back(saved):
    path, identity, keys = saved
    assert np.array_equal(load_index(path, identity), keys)


def test_every_mutation_of_the_identity_is_refused_or_equal(saved):
    path, identity, keys = saved
    with open(path + ".json", "rb") as f:
        good = f.read()
    for label, data in mutations(good):
        with open(path + ".json", "wb") as f:
            f.write(data)
        try:
            loaded = load_index(path, identity)
        except tp.ConfigError as error:
            assert path in str(error), label
        else:
            assert np.array_equal(loaded, keys), label


@pytest.mark.parametrize(
    "make",
    [
        lambda keys: keys.astype(np.float64),
        lambda keys: keys.astype(np.int64),
        lambda keys: keys.reshape(-1),
        lambda keys: keys[:, :1],
        lambda keys: np.array([{"a": 1}], dtype=object),
    ],
    ids=["float", "signed", "flat", "one-column", "pickled"],
)
def test_a_key_array_that_save_index_did_not_write_is_refused(saved, make):
    path, identity, keys = saved
    with open(path + ".npy", "wb") as f:
        np.save(f, make(keys), allow_pickle=True)
    with pytest.raises(tp.ConfigError, match="index"):
        load_index(path, identity)


def test_a_truncated_key_array_is_refused(saved):
    path, identity, _ = saved
    with open(path + ".npy", "r+b") as f:
        f.truncate(40)
    with pytest.raises(tp.ConfigError, match=r"index\.npy: not a key array|cannot be read"):
        load_index(path, identity)
