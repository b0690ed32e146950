"""AdaptiveBlend: the bound under random weight sequences, each child's order, purity, refusals."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenport.blend import AdaptiveBlend, build_blending_indices
from tokenport.blend.adaptive import _SCALE
from tokenport.errors import ConfigError


class Child:
    """A child dataset whose sample ``k`` names itself, with a batch path."""

    def __init__(self, name: int, length: int) -> None:
        self.name, self.length = name, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, k: int) -> dict:
        if not 0 <= k < self.length:
            raise IndexError(k)
        return {"tokens": np.array([self.name, k], np.int64)}

    def get_batch(self, ids) -> dict:
        ids = np.asarray(ids, np.int64)
        return {"tokens": np.stack([np.full(len(ids), self.name), ids], axis=1)}


def _weights(n: int):
    return st.lists(st.sampled_from([0.0, 0.0, 1e-9, 0.1, 0.5, 1.0, 3.0, 7.5]), min_size=n, max_size=n).filter(any)


@st.composite
def _runs(draw):
    n = draw(st.integers(1, 12))
    size = draw(st.integers(1, 400))
    initial = draw(_weights(n))
    every = draw(st.sampled_from([1, 1, 3, 17, 1000]))
    updates = [(start, draw(_weights(n))) for start in range(every, size, every)]
    return n, size, initial, updates


def _exact_deficits(blend: AdaptiveBlend, size: int) -> np.ndarray:
    """``(I_i(t) - C_i(t)) * Q`` for every prefix t = 1..size, computed here in exact integers (int64 fits)."""
    n = len(blend.datasets)
    starts = blend._starts
    shares = np.zeros((size, n), np.int64)
    for j, (start, value) in enumerate(zip(starts, blend._rows)):
        end = starts[j + 1] if j + 1 < len(starts) else size
        shares[start:end] = value
    ideal = np.cumsum(shares, axis=0)
    taken = np.cumsum(np.eye(n, dtype=np.int64)[blend.dataset_index[:size]], axis=0) * _SCALE
    return ideal - taken


@settings(max_examples=150, deadline=None)
@given(_runs())
def test_bound_order_and_purity_under_random_weights(run):
    n, size, initial, updates = run
    blend = AdaptiveBlend([Child(i, 5 + 3 * i) for i in range(n)], initial, num_samples=size, updates=updates)
    # realize in uneven pieces: the stream must not depend on how it is read
    for stop in range(0, size + 1, 37):
        blend.realize(stop)
    blend.realize(size)
    deficits = _exact_deficits(blend, size)
    assert (deficits >= -(_SCALE - _SCALE // n)).all()  # never more than 1 - 1/n ahead
    assert (deficits <= (n - 1) * (_SCALE - _SCALE // n)).all()  # never more than (n-1)(1-1/n) behind
    # each child's samples in order 0, 1, 2, ... (modulo its length), none lost or repeated
    datasets, samples = blend.locate_many(np.arange(size))
    for i in range(n):
        mine = samples[datasets == i]
        assert np.array_equal(mine, np.arange(len(mine)) % (5 + 3 * i))
    # a pure function of (lengths, initial weights, updates)
    again = AdaptiveBlend([Child(i, 5 + 3 * i) for i in range(n)], initial, num_samples=size, updates=blend.updates)
    assert np.array_equal(again.locate_many(np.arange(size))[0], datasets)


def test_positive_weight_is_never_starved():
    n = 6
    weights = [1.0, 1e-3, 0, 0, 0, 0]  # dataset 1 tiny but positive
    blend = AdaptiveBlend([Child(i, 50) for i in range(n)], weights, num_samples=20_000)
    bound = ((n - 1) * (1 - 1 / n) + 1) / (1e-3 / 1.001)
    first = int(np.flatnonzero(blend.locate_many(np.arange(20_000))[0] == 1)[0])
    assert first <= bound
    assert blend.samples_per_dataset(20_000)[2:].sum() == 0


def test_shares_follow_the_weights_and_switch_at_the_update():
    blend = AdaptiveBlend([Child(0, 100), Child(1, 100)], [1, 0], num_samples=1000)
    assert (blend.locate_many(np.arange(100))[0] == 0).all()
    blend.set_weights([1, 3], 100)
    datasets = blend.locate_many(np.arange(1000))[0]
    assert datasets[100:].mean() == pytest.approx(0.75, abs=2e-3)
    assert np.allclose(blend.target_shares(1000), [0.1 + 0.9 * 0.25, 0.9 * 0.75])
    assert np.abs(blend.realized_shares(1000) - blend.target_shares(1000)).max() < 1 / 1000
    assert blend.updates == ((100, (1.0, 3.0)),)


def test_constant_weights_keep_the_static_blends_shares():
    weights = np.array([0.5, 0.3, 0.2])
    blend = AdaptiveBlend([Child(i, 10**4) for i in range(3)], weights, num_samples=10**4)
    static, _ = build_blending_indices(weights, 10**4)
    assert np.array_equal(blend.samples_per_dataset(10**4), np.bincount(static, minlength=3))


def test_items_batches_and_describe():
    blend = AdaptiveBlend([Child(0, 3), Child(1, 4)], [1, 1], num_samples=20)
    batch = blend.get_batch([5, 0, 19])
    for row, idx in enumerate([5, 0, 19]):
        item = blend[idx]
        assert batch["dataset_id"][row] == item["dataset_id"]
        assert np.array_equal(batch["tokens"][row], item["tokens"])
    assert blend.locate(19) == (blend[19]["dataset_id"], int(blend[19]["tokens"][1]))
    blend.set_weights([0, 1], 20)  # at the end: recorded, applies to nothing
    described = blend.describe()
    assert described == {
        "type": "AdaptiveBlend",
        "length": 20,
        "dataset_lengths": [3, 4],
        "initial_weights": [1.0, 1.0],
        "updates": [[20, [0.0, 1.0]]],
    }
    with pytest.raises(IndexError):
        blend.get_batch([20])


def test_refusals():
    blend = AdaptiveBlend([Child(0, 3), Child(1, 4)], [1, 1], num_samples=100)
    blend.realize(10)
    for weights, start, words in [
        ([1, 1], 9, "realized already"),
        ([1], 50, "expected 2 weights"),
        ([1, -1], 50, "finite and >= 0"),
        ([0, 0], 50, "all zero"),
        ([float("nan"), 1], 50, "finite"),
        ([1, 1], 101, "from_sample"),
    ]:
        with pytest.raises(ConfigError, match=words):
            blend.set_weights(weights, start)
    blend.set_weights([1, 2], 50)
    with pytest.raises(ConfigError, match="before the last update"):
        blend.set_weights([1, 1], 40)
    blend.set_weights([2, 1], 50)  # the same sample: replaces
    assert blend.updates == ((50, (2.0, 1.0)),)
    with pytest.raises(ConfigError, match="holds no samples"):
        AdaptiveBlend([Child(0, 3), Child(1, 0)], [1, 1], num_samples=10)
    with pytest.raises(ConfigError, match="pair"):
        AdaptiveBlend([Child(0, 3)], [1], num_samples=10, updates=[5])


def test_restore_updates_rebuilds_the_same_stream():
    blend = AdaptiveBlend([Child(i, 7) for i in range(3)], [1, 2, 3], num_samples=500)
    for start in range(10, 500, 10):
        blend.realize(start)
        blend.set_weights([start % 7 + 1, 1, (start // 10) % 3], start)
    full = blend.locate_many(np.arange(500))
    blend.restore_updates(blend.updates)
    assert blend.frontier == 0
    again = blend.locate_many(np.arange(500))
    assert np.array_equal(full[0], again[0]) and np.array_equal(full[1], again[1])


def test_both_kernels_make_the_same_choices():
    rng = np.random.default_rng(3)
    n = 40
    updates = [(start, rng.random(n) * (rng.random(n) < 0.7)) for start in range(1, 5000, 97)]
    packed = AdaptiveBlend([Child(i, 11) for i in range(n)], np.ones(n), num_samples=5000, updates=updates)
    scanned = AdaptiveBlend([Child(i, 11) for i in range(n)], np.ones(n), num_samples=5000, updates=updates)
    scanned._bits = None  # the general kernel, used where the packed keys would not fit an int64
    assert packed._bits is not None
    assert np.array_equal(packed.locate_many(np.arange(5000))[0], scanned.locate_many(np.arange(5000))[0])
