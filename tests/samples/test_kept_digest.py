"""A receipt of cached (memory-mapped, read-only) indices hashes them once per dataset, not per check; indices
that could be written are hashed at every check, so an in-place change is never hidden by a kept digest."""

from __future__ import annotations

import mmap

import numpy as np

import tokenport as tp
from tests.samples.test_occurrences import random_store
from tokenport.samples import base
from tokenport.samples.base import kept_while_frozen


def _counting(monkeypatch) -> list[int]:
    """The ids of the arrays digest() hashes from now on."""
    calls: list[int] = []
    real = base.digest

    def counted(*arrays):
        calls.extend(id(array) for array in arrays)
        return real(*arrays)

    from tokenport.blend import dataset as blend_module
    from tokenport.samples import gpt

    for module in (base, gpt, blend_module):
        monkeypatch.setattr(module, "digest", counted)
    return calls


def test_read_only_maps_are_hashed_once_and_the_rest_every_time(tmp_path, monkeypatch):
    path = tmp_path / "a.bin"
    np.arange(100, dtype=np.int64).tofile(path)
    with open(path, "rb") as f:
        mapped = np.frombuffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), dtype=np.int64)
    owned = np.arange(100, dtype=np.int64)
    view = owned.view()
    view.setflags(write=False)  # read-only, but its base can still be written
    owner = type("Owner", (), {})()
    calls: list[int] = []
    for arrays, computed in (((mapped,), 1), ((mapped[::2],), 1), ((owned,), 3), ((view,), 3)):
        before = len(calls)
        for _ in range(3):
            kept_while_frozen(owner, str(id(arrays[0])), arrays, lambda: calls.append(1) or 7)
        assert len(calls) - before == computed
    owned[0] = 5  # the read-only view's bytes changed: it was never kept
    assert kept_while_frozen(owner, "view", (view,), lambda: int(view[0])) == 5


def test_a_cached_gpt_blend_receipt_hashes_its_indices_once(tmp_path, monkeypatch):
    from tokenport.integrations.receipt import data_receipt

    store = random_store(tmp_path / "s", np.random.default_rng(3), documents=20, longest=50)
    other = random_store(tmp_path / "o", np.random.default_rng(4), documents=20, longest=50)
    build = dict(sizes=(120, 0, 0), config=tp.GPTSampleConfig(16), seed=1, split="1,0,0")
    spec = ["0.5", str(store.prefix), "0.5", str(other.prefix)]
    cached = tp.build_datasets(spec, cache=str(tmp_path / "cache"), **build)[0]
    plain = tp.build_datasets(spec, **build)[0]
    calls = _counting(monkeypatch)
    first = data_receipt(cached)
    indices = {id(cached.dataset_index)} | {
        id(a) for child in cached.datasets for a in (child.document_index, child.sample_index, child.shuffle_index)
    }
    assert indices <= set(calls)
    calls.clear()
    assert data_receipt(cached) == first and not indices & set(calls)  # the indices are not hashed again
    assert data_receipt(plain) == first  # the same receipt as in-memory indices give
    before = len(calls)
    data_receipt(plain)
    assert len(calls) > before  # in-memory (writeable) indices: hashed at each check
    plain.datasets[0].shuffle_index[[0, 1]] = plain.datasets[0].shuffle_index[[1, 0]]
    assert data_receipt(plain) != first  # an in-place change shows
