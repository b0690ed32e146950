"""AdaptiveBlend's reports from running aggregates: ideal counts, counts and shares equal a fresh walk,
and a weight update with metrics on reads no earlier update (its cost does not grow with them)."""

import numpy as np
import pytest

import tokenport.blend.adaptive as adaptive
from tokenport import PretrainingSampler, metrics
from tokenport.blend import AdaptiveBlend
from tokenport.blend.adaptive import _SCALE, quantized_shares
from tokenport.errors import ConfigError
from tokenport.integrations import StatefulLoader


class Child:
    """A child whose samples are one token, with a batch path."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, k: int) -> dict:
        return {"tokens": np.array([k], np.int64)}

    def get_batch(self, ids) -> dict:
        return {"tokens": np.asarray(ids, np.int64).reshape(-1, 1)}


def exact_ideal(blend: AdaptiveBlend, stop: int) -> np.ndarray:
    """I_i(stop) from every segment in exact integers, rounded once (the definition)."""
    total = [0] * len(blend.datasets)
    for start, shares, end in zip(blend._starts, blend._rows, [*blend._starts[1:], stop]):
        for i, share in enumerate(shares.tolist()):
            total[i] += share * max(0, min(end, stop) - start)
    return np.array([float(value) / _SCALE for value in total])


def random_blend(rng: np.random.Generator) -> AdaptiveBlend:
    """A blend realized in random steps, its weights changed (often to zeros, at huge or tiny scales) on the way."""
    n, size = int(rng.integers(1, 30)), int(rng.integers(1, 2000))
    blend = AdaptiveBlend([range(size)] * n, rng.random(n) + 0.01, num_samples=size)
    position = 0
    while position < size:
        position = min(size, position + int(rng.integers(1, 80)))
        blend.realize(position)
        if position < size and rng.random() < 0.7:
            weights = rng.random(n) * (rng.random(n) < 0.7) * 10.0 ** int(rng.integers(-200, 200))
            weights[int(rng.integers(n))] += 1e-3 if not weights.any() else 0
            blend.set_weights(weights, position + int(rng.integers(0, min(5, size - position))))
            blend.realize(min(size, blend.updates[-1][0]))
            position = blend.frontier
    return blend


@pytest.mark.parametrize("near", [adaptive._NEAR, 7])  # 7: stops farther than that take the full walk
def test_ideal_counts_and_counts_equal_a_fresh_walk(monkeypatch, near):
    monkeypatch.setattr(adaptive, "_NEAR", near)
    rng = np.random.default_rng(near)
    for _ in range(40):
        blend = random_blend(rng)
        size = len(blend)
        for stop in {0, 1, size, *rng.integers(0, size + 1, 12).tolist()}:
            assert np.array_equal(blend.ideal_counts(stop), exact_ideal(blend, stop))
            fresh = np.bincount(blend.dataset_index[:stop], minlength=len(blend.datasets))
            assert np.array_equal(blend.samples_per_dataset(stop), fresh)
            if stop:
                assert np.array_equal(blend.target_shares(stop), exact_ideal(blend, stop) / stop)


def test_ideal_counts_mid_stream_equal_a_fresh_walk():
    """Between realizations too: stops before, at and after a frontier that is not at the end."""
    rng = np.random.default_rng(3)
    blend = AdaptiveBlend([range(500)] * 5, [1, 2, 3, 4, 5], num_samples=500)
    for position in range(1, 400, 37):
        blend.realize(position)
        blend.set_weights(rng.random(5) + 0.1, position)
        for stop in range(max(0, position - 40), min(500, position + 40)):
            assert np.array_equal(blend.ideal_counts(stop), exact_ideal(blend, stop))


def test_one_row_kernel_gives_the_shares_of_the_array_path():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        n = int(rng.integers(1, 200))
        weights = rng.random(n) * (rng.random(n) < rng.random()) * 10.0 ** int(rng.integers(-300, 300))
        if rng.random() < 0.05:
            weights = np.full(n, 1e308)  # the sum overflows: the array path's rescaling
        weights[0] += 0 if weights.any() else 1.0
        one = quantized_shares(weights)
        assert one.sum() == _SCALE
        assert np.array_equal(one, quantized_shares(weights[None, :])[0])  # 2-d rows: the numpy steps


class CountingList(list):
    """A list that counts the walks over it (iterations and slices)."""

    walks = 0

    def __iter__(self):
        CountingList.walks += 1
        return super().__iter__()

    def __getitem__(self, key):
        if isinstance(key, slice):
            CountingList.walks += 1
        return super().__getitem__(key)


def test_an_update_with_metrics_on_walks_no_earlier_update():
    size, n = 5000, 20
    rng = np.random.default_rng(1)
    updates = [(2 * k + 2, rng.random(n) + 0.01) for k in range(2000)]
    blend = AdaptiveBlend([Child(size)] * n, np.ones(n), num_samples=size, updates=updates)
    loader = StatefulLoader(blend, PretrainingSampler(size, 0, 4, 0, 1))
    batches = iter(loader)
    for _ in range(1100):  # past the 2000 updates' samples
        next(batches)
    blend._starts, blend._rows = CountingList(blend._starts), CountingList(blend._rows)
    metrics.enable()
    try:
        for _ in range(20):
            next(batches)
            CountingList.walks = 0
            loader.set_mixture(rng.random(n) + 0.01)
            assert CountingList.walks == 0
        registry = metrics.registry()
        handed = min(loader.consumed_samples, blend.frontier)
        for d, want in enumerate(exact_ideal(blend, handed) / handed):
            assert registry.get_sample_value("tokenport_mixture_target_ratio", {"dataset": str(d)}) == want
    finally:
        metrics.disable()


def test_weights_are_copied_and_checked_in_order():
    blend = AdaptiveBlend([range(10), range(0), range(10)], [1, 0, 1], num_samples=10)
    weights = np.array([1.0, 0.0, 2.0])
    blend.set_weights(weights, 0)
    weights[0] = 5.0  # the caller's array changes afterwards: the blend keeps what it was given
    assert blend.updates == ((0, (1.0, 0.0, 2.0)),)
    for bad, message in (
        ([np.nan, 0, 1], r"weights\[0\]=\S*nan\S*: weights must be finite"),
        ([1, 0, -1], r"weights\[2\]=\S*-1.0\S*: weights must be finite"),
        ([0, 0, 0], "all zero"),
        ([1, 1, np.inf], r"weights\[2\]=\S*inf"),
        ([1, 2, 1], r"weights\[1\]=\S*2.0\S* but dataset 1 holds no samples"),
        (["1", 0, 1], "expected one number per dataset"),
    ):
        with pytest.raises(ConfigError, match=message):
            blend.set_weights(bad, 0)
        assert blend.updates == ((0, (1.0, 0.0, 2.0)),)


def test_packed_kernel_takes_the_samples_of_the_plain_scan():
    """The packed keys (added to in place, no multiply) choose as the plain scan of the deficits does, ties
    to the lowest index included, and leave the same deficits and counts, realized in one go or in steps."""
    rng = np.random.default_rng(7)
    for trial in range(60):
        # both of the kernel's passes: the drop of the key taken in the next pass (few datasets) or stored at once
        n = int(rng.integers(1, 120)) if trial % 4 else int(rng.integers(adaptive._LONE_STORE, 700))
        size = int(rng.integers(1, 2500))
        updates, position = [], 0
        while (position := position + int(rng.integers(1, 300))) < size:
            weights = rng.integers(0, 4, n) * (rng.random(n) < 0.8) * 1.0  # small integers: many ties
            weights[int(rng.integers(n))] += 0 if weights.any() else 1
            updates.append((position, weights))
        packed = AdaptiveBlend([range(size)] * n, np.ones(n), num_samples=size, updates=updates)
        scan = AdaptiveBlend([range(size)] * n, np.ones(n), num_samples=size, updates=updates)
        assert packed._bits is not None
        scan._bits = None  # the plain scan kernel
        for stop in sorted({*rng.integers(0, size + 1, 3).tolist(), size}):
            packed.realize(stop), scan.realize(stop)
            assert np.array_equal(packed.dataset_index, scan.dataset_index)
            assert np.array_equal(packed._sample_count[:stop], scan._sample_count[:stop])
            assert np.array_equal(packed._deficit, scan._deficit) and np.array_equal(packed._counts, scan._counts)
