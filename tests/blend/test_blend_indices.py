"""Blending indices: megatron-core's, element for element, and Tijdeman's bound as a property."""

from __future__ import annotations

import re
import warnings
from fractions import Fraction

import numpy as np
import pytest

from tokenport.blend import (
    SampleIndexCheckpoints,
    build_blending_indices,
    build_dataset_index,
    max_prefix_deviation,
    tijdeman,
)
from tokenport.errors import ConfigError

ALGORITHMS = ("tijdeman", "greedy", "megatron")


def _megatron():
    """megatron-core's compiled helpers and its weight normalization, imported quietly."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        helpers = pytest.importorskip("megatron.core.datasets.helpers_cpp")
        from megatron.core.datasets.utils import normalize
    return helpers, normalize


def _sigma(n: int) -> float:
    """Tijdeman's bound for n active datasets."""
    return 0.0 if n < 2 else 1.0 - 1.0 / (2 * n - 2)


def _tolerance(weights: np.ndarray, size: int) -> float:
    """The bound's slack against float weights: the schedule is exact for the integer weights a / A."""
    raw = np.asarray(weights, dtype=np.float64)
    normalized = raw / raw.sum()
    active = normalized[normalized > 0]
    if len(active) < 2:
        return 1e-9
    integers, total = tijdeman.integer_weights(active)
    return size * float(np.abs(integers / total - active).max()) + 1e-9


def _counts_matrix(dataset_index: np.ndarray, n: int) -> np.ndarray:
    """C_i(t) for t = 0..size as an (n, size + 1) int64 matrix (small cases only)."""
    out = np.zeros((n, len(dataset_index) + 1), dtype=np.int64)
    for i in range(n):
        np.cumsum(dataset_index == i, out=out[i, 1:])
    return out


# -- megatron-core, the real peer -------------------------------------------------------------------

PEER_CASES = [
    (1, 1),
    (1, 1000),
    (2, 1),
    (2, 2),
    (2, 10**6),
    (3, 3),
    (3, 10**5),
    (7, 10**5),
    (16, 10**5),
    (100, 10**4),
    (1000, 2000),
]


@pytest.mark.parametrize("n, size", PEER_CASES)
def test_megatron_equals_peer(n: int, size: int) -> None:
    helpers, normalize = _megatron()
    rng = np.random.default_rng(n * 7919 + size)
    weights = rng.dirichlet(np.ones(n) * rng.choice([0.3, 1.0, 5.0])) * rng.uniform(0.5, 50.0)
    theirs_index = np.zeros(size, dtype=np.int16)
    theirs_sample = np.zeros(size, dtype=np.int64)
    helpers.build_blending_indices(theirs_index, theirs_sample, normalize(weights.tolist()), n, size, False)
    ours_index, ours_sample = build_blending_indices(weights, size, algorithm="megatron")
    assert ours_index.dtype == theirs_index.dtype and ours_sample.dtype == theirs_sample.dtype
    assert np.array_equal(ours_index, theirs_index)
    assert np.array_equal(ours_sample, theirs_sample)


@pytest.mark.parametrize(
    "n, per_dataset", [(1, 50), (2, 10**5), (3, 1000), (7, 5000), (16, 2000), (100, 100), (1000, 5)]
)
def test_megatron_exhaustive_equals_peer(n: int, per_dataset: int) -> None:
    helpers, _ = _megatron()
    rng = np.random.default_rng(n)
    counts = rng.integers(1, 2 * per_dataset, n).astype(np.int64)
    total = int(counts.sum())
    theirs_index = np.zeros(total, dtype=np.int16)
    theirs_sample = np.zeros(total, dtype=np.int64)
    helpers.build_exhaustive_blending_indices(theirs_index, theirs_sample, counts, n)
    ours_index, ours_sample = build_blending_indices(counts, None, algorithm="megatron")
    assert ours_index.dtype == theirs_index.dtype and ours_sample.dtype == theirs_sample.dtype
    assert np.array_equal(ours_index, theirs_index)
    assert np.array_equal(ours_sample, theirs_sample)


def test_megatron_drops_zero_weights_as_if_absent() -> None:
    """Megatron refuses weight 0 (its helper would then take that dataset); we blend the rest as it would."""
    helpers, normalize = _megatron()
    weights = np.array([0.0, 0.3, 0.0, 0.5, 0.2, 0.0])
    active = np.flatnonzero(weights)
    size = 10_000
    theirs = np.zeros(size, dtype=np.int16)
    helpers.build_blending_indices(
        theirs, np.zeros(size, np.int64), normalize(weights[active].tolist()), len(active), size, False
    )
    assert np.array_equal(build_dataset_index(weights, size, algorithm="megatron"), active[theirs])


def test_megatron_dtype_widens_past_int16() -> None:
    index, sample = build_blending_indices(np.ones(40_000), 100, algorithm="megatron")
    assert index.dtype == np.int32 and sample.dtype == np.int64
    assert np.array_equal(index, np.arange(100))


def _python_greedy(weights: list[float], size: int, corrected: bool) -> list[int]:
    """The largest-error-first greedy, written plainly: an oracle for the numba kernel."""
    total = sum(weights)
    shares = [w / total for w in weights]
    counts = [0] * len(weights)
    chosen = []
    for j in range(size):
        x = float(j + 1) if corrected else max(float(j), 1.0)
        errors = [share * x - count for share, count in zip(shares, counts)]
        best = errors.index(max(errors))
        counts[best] += 1
        chosen.append(best)
    return chosen


@pytest.mark.parametrize("seed", range(4))
def test_greedy_equals_plain_python(seed: int) -> None:
    rng = np.random.default_rng(seed)
    weights = rng.dirichlet(np.ones(int(rng.integers(2, 9)))).tolist()
    for algorithm, corrected in (("greedy", True), ("megatron", False)):
        ours = build_dataset_index(weights, 3000, algorithm=algorithm).tolist()
        assert ours == _python_greedy(weights, 3000, corrected)


def test_greedy_fixes_megatrons_first_step() -> None:
    """Megatron aims at max(j, 1) * w at steps 0 and 1, so its second sample is the other dataset."""
    weights = np.array([0.3, 0.7])
    assert build_dataset_index(weights, 5, algorithm="megatron").tolist() == [1, 0, 1, 1, 0]
    assert build_dataset_index(weights, 4, algorithm="greedy").tolist() == [1, 0, 1, 1]
    assert build_dataset_index(weights, 2, algorithm="tijdeman").tolist() == [1, 0]


# -- Tijdeman's bound --------------------------------------------------------------------------------


def _weight_cases():
    """(name, weights, size): random, skewed and adversarial weights, n from 1 to 10^4."""
    rng = np.random.default_rng(2024)
    cases = [
        ("one", np.array([3.0]), 1000),
        ("two-even", np.array([1.0, 1.0]), 10**5),
        ("two-extreme", np.array([1e-6, 1 - 1e-6]), 10**6),
        ("huge-and-tiny", np.concatenate(([1.0], np.full(999, 1e-7))), 2 * 10**5),
        ("equal-1000", np.full(1000, 0.25), 10**5),
        ("powers", 2.0 ** -np.arange(40), 10**5),
        ("integers", np.array([1, 2, 3, 5, 8, 13, 21]), 10**5),
    ]
    for n in (2, 3, 5, 16, 64, 65, 200):
        for alpha in (0.1, 1.0, 10.0):
            cases.append((f"dirichlet-{n}-{alpha}", rng.dirichlet(np.full(n, alpha)), 3 * 10**4))
    for n in (3, 30, 300):
        cases.append((f"lognormal-{n}", rng.lognormal(0.0, 3.0, n), 5 * 10**4))
    cases.append(("dirichlet-10000", rng.dirichlet(np.ones(10**4)), 10**6))
    return cases


@pytest.mark.parametrize("name, weights, size", _weight_cases(), ids=[c[0] for c in _weight_cases()])
def test_tijdeman_bound(name: str, weights: np.ndarray, size: int) -> None:
    index, sample = build_blending_indices(weights, size)
    n = int((np.asarray(weights) > 0).sum())
    assert max_prefix_deviation(index, weights) <= _sigma(n) + _tolerance(weights, size)
    assert np.array_equal(sample, _running_counts(index, len(weights)))


def _running_counts(index: np.ndarray, n: int) -> np.ndarray:
    """dataset_sample_index another way: each dataset's positions, in order, numbered from 0."""
    order = np.argsort(index, kind="stable")
    starts = np.concatenate(([0], np.cumsum(np.bincount(index, minlength=n))))
    out = np.empty(len(index), dtype=np.int64)
    out[order] = np.arange(len(index)) - starts[index[order]]
    return out


@pytest.mark.parametrize("seed", range(6))
def test_tijdeman_bound_exact_on_integer_weights(seed: int) -> None:
    """For integer weights the bound holds in exact rational arithmetic: M |C_i(t) A - t a_i| <= (M - 1) A."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 12))
    counts = rng.integers(1, 400, n)
    total = int(counts.sum())
    index, _ = build_blending_indices(counts, None)
    taken = _counts_matrix(index, n)
    t = np.arange(total + 1)
    m = 2 * n - 2
    assert (m * np.abs(taken * total - np.outer(counts, t)) <= (m - 1) * total).all()


def test_tijdeman_bound_exact_with_fractions() -> None:
    """The quantized float weights a / A hold the bound exactly (checked with Fractions on a small case)."""
    weights = np.random.default_rng(5).dirichlet(np.ones(5))
    integers, total = tijdeman.integer_weights(weights)
    index = build_dataset_index(weights, 3000)
    sigma = Fraction(7, 8)  # 1 - 1/(2*5 - 2)
    counts = [0] * 5
    for t, d in enumerate(index.tolist(), start=1):
        counts[d] += 1
        for i in range(5):
            assert abs(counts[i] - Fraction(t * int(integers[i]), total)) <= sigma


def test_greedy_and_megatron_exceed_the_bound() -> None:
    """Why the default exists: on random weights the greedy passes 1.1, Megatron's greedy 1.7 (Tijdeman < 1)."""
    for seed, algorithm, floor in ((112, "greedy", 1.1), (60, "megatron", 1.7)):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(3, 40))
        weights = rng.dirichlet(np.ones(n) * rng.choice([0.3, 1.0, 3.0]))
        assert max_prefix_deviation(build_dataset_index(weights, 20_000, algorithm=algorithm), weights) > floor
        assert max_prefix_deviation(build_dataset_index(weights, 20_000), weights) < 1.0


def test_tijdeman_prefix_consistent() -> None:
    """A longer blend starts with the shorter one: the size only says where to stop."""
    weights = np.random.default_rng(1).lognormal(0, 2, 300)
    long = build_dataset_index(weights, 50_000)
    for size in (1, 17, 4096, 33_333):
        assert np.array_equal(build_dataset_index(weights, size), long[:size])


def test_tijdeman_kernels_agree() -> None:
    """Every kernel makes the same choices: two-dataset, scan, packed heap, pair heap, round robin."""
    rng = np.random.default_rng(3)
    cases = [np.array(w, dtype=np.int64) for w in ([1, 3], [3, 1], [2, 5], [1, 7, 7], [1, 1, 2, 2, 3], [4, 4, 4, 4])]
    for n in (2, 3, 9, 64, 300):
        cases.append(tijdeman.integer_weights(rng.dirichlet(np.full(n, 0.5)))[0])
        cases.append(rng.integers(1, 6, n).astype(np.int64))  # small integers: many equal deadlines
    size = 20_000
    for weights in cases:
        weights, total = tijdeman.exact_weights(weights)
        n = len(weights)
        ids = np.arange(n, dtype=np.int64)
        bits = max(1, (n - 1).bit_length())
        cap = (2 * n - 3) * (size + 1) + 1
        kernels = [
            lambda o, s: tijdeman._heap_kernel(weights, total, ids, o, s),
            lambda o, s: tijdeman._packed_heap_kernel(weights, total, ids, bits, cap, o, s),
            lambda o, s: tijdeman._scan_kernel(weights, total, ids, bits, cap, o, s),
        ]
        if n == 2:
            kernels.append(lambda o, s: tijdeman._two_kernel(weights, total, ids, o, s))
        if (weights == weights[0]).all():
            kernels.append(lambda o, s: tijdeman._round_robin_kernel(ids, o, s))
        results = []
        for kernel in kernels:
            out, samples = np.empty(size, np.uint16), np.empty(size, np.int64)
            kernel(out, samples)
            results.append((out, samples))
        for out, samples in results[1:]:
            assert np.array_equal(out, results[0][0]) and np.array_equal(samples, results[0][1]), weights


def test_equal_weights_are_the_round_robin() -> None:
    for n in (2, 3, 10, 1000):
        index, sample = build_blending_indices(np.full(n, 0.1), 5000)
        assert np.array_equal(index, np.arange(5000) % n)
        assert np.array_equal(sample, np.arange(5000) // n)


# -- exhaustive blends, zero weights, dtypes -----------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("counts", [[5], [1, 1], [3, 0, 7], [1, 10**5], [0, 2, 9, 4, 4, 1000, 1], list(range(1, 300))])
def test_exhaustive_takes_every_sample_once(algorithm: str, counts: list) -> None:
    index, sample = build_blending_indices(np.array(counts), None, algorithm=algorithm)
    assert len(index) == sum(counts)
    assert np.array_equal(np.bincount(index, minlength=len(counts)), counts)
    for i, count in enumerate(counts):
        assert np.array_equal(sample[index == i], np.arange(count))


def test_exhaustive_accepts_integral_floats() -> None:
    assert np.array_equal(build_dataset_index([2.0, 3.0], None), build_dataset_index(np.array([2, 3]), None))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_zero_weight_never_chosen(algorithm: str) -> None:
    weights = np.array([0.0, 1.0, 0.0, 2.0, 0.0, 0.5])
    index = build_dataset_index(weights, 50_000, algorithm=algorithm)
    assert set(np.unique(index).tolist()) == {1, 3, 5}
    single = build_dataset_index(np.array([0.0, 0.0, 4.0]), 100, algorithm=algorithm)
    assert (single == 2).all()


@pytest.mark.parametrize(
    "n, dtype", [(1, np.uint8), (256, np.uint8), (257, np.uint16), (65_536, np.uint16), (70_000, np.uint32)]
)
def test_dtype_by_dataset_count(n: int, dtype: type) -> None:
    weights = np.random.default_rng(n).dirichlet(np.ones(n))
    index, sample = build_blending_indices(weights, 3 * n)
    assert index.dtype == dtype and sample.dtype == np.int64
    assert int(index.max()) < n
    assert max_prefix_deviation(index, weights) <= _sigma(n) + _tolerance(weights, 3 * n)


def test_greedy_dtype() -> None:
    index, sample = build_blending_indices(np.ones(300), 1000, algorithm="greedy")
    assert index.dtype == np.uint16 and sample.dtype == np.int64


def test_build_dataset_index_is_the_first_array() -> None:
    weights = np.random.default_rng(9).dirichlet(np.ones(40))
    for algorithm in ALGORITHMS:
        assert np.array_equal(
            build_dataset_index(weights, 7777, algorithm=algorithm),
            build_blending_indices(weights, 7777, algorithm=algorithm)[0],
        )


# -- the deviation and the checkpoints --------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_max_prefix_deviation_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 8))
    weights = rng.uniform(0, 1, n)
    index = rng.integers(0, n, int(rng.integers(0, 400))).astype(np.uint8)
    w = weights / weights.sum()
    brute = np.abs(_counts_matrix(index, n) - np.outer(w, np.arange(len(index) + 1))).max()
    assert max_prefix_deviation(index, weights) == pytest.approx(brute, abs=1e-12)


@pytest.mark.parametrize(
    "n, size, block",
    [(1, 10, None), (3, 10_000, None), (5, 50_000, 1000), (300, 100_000, None), (7, 12_345, 100), (20, 5000, 1)],
)
def test_checkpoints_recover_the_sample_index(n: int, size: int, block: int | None) -> None:
    rng = np.random.default_rng(n)
    index, sample = build_blending_indices(rng.dirichlet(np.ones(n) * 0.5), size)
    checkpoints = SampleIndexCheckpoints(index, n, block)
    expected_block = max(4096, 16 * n) if block is None else block
    assert checkpoints.block == expected_block
    assert checkpoints.counts.shape == (-(-size // expected_block), n)
    assert np.array_equal(checkpoints.take(np.arange(size)), sample)
    positions = rng.integers(-size, size, 500)
    assert np.array_equal(checkpoints.take(positions), sample[positions])
    assert checkpoints[size - 1] == sample[-1] and checkpoints[-size] == sample[0]
    with pytest.raises(IndexError):
        checkpoints[size]


# -- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "weights, size, algorithm, words",
    [
        ([1.0, -0.5], 10, "tijdeman", "weights[1]=-0.5 is negative"),
        ([1.0, np.nan], 10, "tijdeman", "weights[1]=nan is NaN"),
        ([np.inf, 1.0], 10, "greedy", "weights[0]=inf is infinite"),
        ([0.0, 0.0], 10, "tijdeman", "all zero"),
        ([[1.0, 2.0]], 10, "tijdeman", "1-D"),
        ([], 10, "megatron", "non-empty"),
        (["a", "b"], 10, "tijdeman", "not numbers"),
        ([1.0, 2.0], 0, "tijdeman", "size=0"),
        ([1.0, 2.0], -3, "tijdeman", "size=-3"),
        ([1.0, 2.0], 2.5, "tijdeman", "size=2.5"),
        ([1.0, 2.0], True, "tijdeman", "size=True"),
        ([1.0, 2.0], 10, "random", "algorithm='random' is unknown"),
        ([1.5, 2.0], None, "tijdeman", "weights[0]=1.5 is not an integer"),
        ([1.0, 2.0**60], None, "megatron", "above 2**53"),
    ],
)
def test_bad_input(weights, size, algorithm, words: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        build_blending_indices(weights, size, algorithm=algorithm)


def test_bad_deviation_input() -> None:
    with pytest.raises(ConfigError, match="outside"):
        max_prefix_deviation(np.array([0, 3]), [1.0, 1.0])
    with pytest.raises(ConfigError, match="1-D integer"):
        max_prefix_deviation(np.array([0.5]), [1.0])
    with pytest.raises(ConfigError, match="block"):
        SampleIndexCheckpoints(np.zeros(3, np.uint8), 1, block=0)


def test_a_size_no_machine_can_allocate_is_refused():
    """A size int64 holds but memory does not used to escape as numpy's _ArrayMemoryError."""
    with pytest.raises(ConfigError, match=r"size=9223372036854775807 is too large: the blend's indices would take"):
        build_dataset_index(np.array([0.5, 0.5]), 2**63 - 1)
