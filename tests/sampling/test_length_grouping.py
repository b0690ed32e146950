"""Length grouping: index-for-index parity with transformers, the numpy-seeded path, samplers, errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tokenport.errors import ConfigError
from tokenport.sampling import (
    DistributedLengthGroupedSampler,
    LengthGroupedSampler,
    get_length_grouped_indices,
    length_grouped_order,
)

torch = pytest.importorskip("torch")
hf = pytest.importorskip("transformers.trainer_pt_utils")


def generator(seed: int):
    return torch.Generator().manual_seed(seed)


def random_case(rng: np.random.Generator, case: int):
    """Random lengths (few distinct values -> many ties, or wide ranges), batch size and multiplier."""
    n = int(rng.choice([1, 2, 3, 7, int(rng.integers(1, 200)), int(rng.integers(200, 5000))]))
    high = int(rng.choice([1, 2, 5, 64, 4096, 70_000]))
    lengths = rng.integers(0, high + 1, n)
    batch_size = int(rng.choice([1, 2, 8, 32, int(rng.integers(1, 64))]))
    mult = None if case % 3 else int(rng.integers(1, 12))
    return lengths, batch_size, mult


@pytest.mark.parametrize("block", range(4))
def test_equals_transformers_on_random_lengths(block):
    rng = np.random.default_rng(1000 + block)
    for case in range(100):
        lengths, batch_size, mult = random_case(rng, case)
        seed = int(rng.integers(0, 2**31))
        expected = hf.get_length_grouped_indices(lengths.tolist(), batch_size, mult, generator(seed))
        assert get_length_grouped_indices(lengths, batch_size, mult, generator(seed)) == expected
        assert get_length_grouped_indices(lengths.tolist(), batch_size, mult, generator=generator(seed)) == expected


@pytest.mark.parametrize(
    "lengths",
    [
        [5],
        [0, 0, 0, 0],
        [3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 9, 9],
        list(range(10)),
        [2**40, 1, 2**40, 7],  # a key wider than 32 bits
        [70_000, 1, 65_535, 65_536, 2, 70_000],  # wider than 16 bits, with ties at the top
    ],
)
@pytest.mark.parametrize("batch_size", [1, 3, 16])
def test_equals_transformers_on_edge_cases(lengths, batch_size):
    for mult in (None, 1, 2):
        for seed in range(5):
            expected = hf.get_length_grouped_indices(lengths, batch_size, mult, generator(seed))
            assert get_length_grouped_indices(lengths, batch_size, mult, generator(seed)) == expected


@pytest.mark.parametrize("dtype", [np.int32, np.uint16, np.uint64, np.int8])
def test_equals_transformers_for_any_integer_dtype(dtype):
    lengths = np.random.default_rng(3).integers(0, 100, 1234).astype(dtype)
    expected = hf.get_length_grouped_indices(lengths.tolist(), 4, None, generator(9))
    assert get_length_grouped_indices(lengths, 4, generator=generator(9)) == expected
    order = length_grouped_order(lengths, 4, generator=generator(9))
    assert order.dtype == np.int64 and order.tolist() == expected


def test_many_megabatches_cross_the_sorting_chunks():
    lengths = np.random.default_rng(4).integers(1, 3000, 300_001)
    expected = hf.get_length_grouped_indices(lengths.tolist(), 3, 1, generator(5))
    assert get_length_grouped_indices(lengths, 3, 1, generator(5)) == expected


def test_global_torch_rng_and_generator_state_follow_transformers():
    lengths = np.random.default_rng(5).integers(1, 50, 500)
    torch.manual_seed(123)
    expected = [hf.get_length_grouped_indices(lengths.tolist(), 4) for _ in range(2)]
    torch.manual_seed(123)
    assert [get_length_grouped_indices(lengths, 4) for _ in range(2)] == expected
    assert expected[0] != expected[1]
    ours, theirs = generator(7), generator(7)
    for _ in range(3):  # the generator advances identically
        assert get_length_grouped_indices(lengths, 4, generator=ours) == hf.get_length_grouped_indices(
            lengths.tolist(), 4, generator=theirs
        )


def test_sampler_equals_transformers_sampler():
    lengths = np.random.default_rng(6).integers(1, 300, 777)
    ours = LengthGroupedSampler(lengths, 8, generator=generator(11))
    theirs = hf.LengthGroupedSampler(8, lengths=lengths.tolist(), generator=generator(11))
    assert len(ours) == len(theirs) == 777
    for _ in range(3):
        mine = list(ours)
        assert mine == list(theirs)
        assert all(type(i) is int for i in mine)


# transformers pads with at most n indices, so it fails when padding needs more (n < num_replicas - 1)
DISTRIBUTED_CASES = [
    (n, num_replicas, drop_last)
    for n in (1, 5, 64, 1001)
    for num_replicas in (1, 2, 3, 8)
    for drop_last in (False, True)
    if drop_last or n >= num_replicas - 1
]


@pytest.mark.parametrize("n, num_replicas, drop_last", DISTRIBUTED_CASES)
def test_distributed_sampler_equals_transformers(n, num_replicas, drop_last):
    lengths = np.random.default_rng(n).integers(1, 100, n)
    for rank in range(num_replicas):
        ours = DistributedLengthGroupedSampler(lengths, 4, num_replicas, rank, seed=17, drop_last=drop_last)
        theirs = hf.DistributedLengthGroupedSampler(
            4, num_replicas=num_replicas, rank=rank, seed=17, drop_last=drop_last, lengths=lengths.tolist()
        )
        assert len(ours) == len(theirs)
        for epoch in (0, 1, 5):
            ours.set_epoch(epoch)
            theirs.set_epoch(epoch)
            assert list(ours) == list(theirs)


def test_distributed_sampler_pads_tiny_datasets_where_transformers_fails():
    ranks = [list(DistributedLengthGroupedSampler([4, 9], 2, 5, rank)) for rank in range(5)]
    order = get_length_grouped_indices([4, 9], 2, generator=generator(0))
    assert [r[0] for r in ranks] == [order[0], order[1], order[0], order[1], order[0]]


def check_grouping(lengths: np.ndarray, order: list[int], batch_size: int, mult: int, perm: np.ndarray) -> None:
    """``order`` is ``perm`` cut into megabatches, each sorted longest first with stable ties,
    then the longest element swapped to the front."""
    size = mult * batch_size
    order = np.asarray(order)
    assert sorted(order.tolist()) == list(range(len(lengths)))
    assert lengths[order[0]] == lengths.max()
    expected = [sorted(perm[a : a + size].tolist(), key=lambda i: -lengths[i]) for a in range(0, len(perm), size)]
    maxima = [lengths[m[0]] for m in expected]
    k = int(np.argmax(maxima))
    expected[0][0], expected[k][0] = expected[k][0], expected[0][0]
    assert order.tolist() == [i for m in expected for i in m]


@pytest.mark.parametrize("seed", [0, 1, 2**40])
def test_numpy_seeded_order_groups_numpy_permutation(seed):
    rng = np.random.default_rng(seed % 1000)
    for case in range(30):
        lengths, batch_size, mult = random_case(rng, case)
        order = get_length_grouped_indices(lengths, batch_size, mult, seed=seed)
        default = max(1, min(len(lengths) // (4 * batch_size), 50))
        perm = np.random.default_rng(seed).permutation(len(lengths))
        check_grouping(lengths, order, batch_size, mult or default, perm)
        assert get_length_grouped_indices(lengths, batch_size, mult, seed=seed) == order


def test_seeded_sampler_reshuffles_per_epoch_deterministically():
    lengths = np.random.default_rng(8).integers(1, 1000, 2000)
    sampler = LengthGroupedSampler(lengths, 16, seed=42)
    first = list(sampler)
    assert list(sampler) == first
    assert first == get_length_grouped_indices(lengths, 16, seed=(42, 0))
    sampler.set_epoch(1)
    second = list(sampler)
    assert second != first and sorted(second) == sorted(first)
    assert second == get_length_grouped_indices(lengths, 16, seed=(42, 1))
    assert list(LengthGroupedSampler(lengths, 16, seed=43)) != first


@pytest.mark.parametrize("drop_last", [False, True])
def test_numpy_distributed_sampler_shares_one_order(drop_last):
    lengths = np.random.default_rng(9).integers(1, 1000, 1003)
    samplers = [
        DistributedLengthGroupedSampler(lengths, 8, 4, rank, seed=3, drop_last=drop_last, rng="numpy")
        for rank in range(4)
    ]
    for epoch in (0, 2):
        for s in samplers:
            s.set_epoch(epoch)
        shares = [list(s) for s in samplers]
        order = get_length_grouped_indices(lengths, 8, seed=(3, epoch))
        total = 1000 if drop_last else 1004
        full = order[:total] if drop_last else order + order[: total - len(order)]
        assert all(len(share) == len(s) == total // 4 for share, s in zip(shares, samplers))
        assert [full[j] for j in range(total)] == [shares[j % 4][j // 4] for j in range(total)]


def test_numpy_paths_run_without_torch():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None  # import torch now raises ImportError
        import numpy as np
        from tokenport.errors import ConfigError
        from tokenport.sampling import (
            DistributedLengthGroupedSampler, LengthGroupedSampler, get_length_grouped_indices)
        lengths = np.arange(100) % 7
        assert sorted(get_length_grouped_indices(lengths, 4, seed=1)) == list(range(100))
        assert len(list(LengthGroupedSampler(lengths, 4, seed=1))) == 100
        assert len(list(DistributedLengthGroupedSampler(lengths, 4, 3, 2, rng="numpy"))) == 34
        for make in (lambda: get_length_grouped_indices(lengths, 4),
                     lambda: LengthGroupedSampler(lengths, 4),
                     lambda: DistributedLengthGroupedSampler(lengths, 4, 3, 2)):
            try:
                make()
            except ConfigError as error:
                assert "torch is not installed" in str(error), error
            else:
                raise AssertionError("no ConfigError without torch")
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_empty_lengths_give_an_empty_order():
    assert get_length_grouped_indices([], 4, seed=0) == []
    assert get_length_grouped_indices(np.zeros(0, np.int32), 4, generator=generator(0)) == []
    assert list(DistributedLengthGroupedSampler([], 4, 2, 1)) == []


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: get_length_grouped_indices([1, 2], 0, seed=0), "batch_size"),
        (lambda: get_length_grouped_indices([1, 2], -3, seed=0), "batch_size"),
        (lambda: get_length_grouped_indices([1, 2], True, seed=0), "batch_size"),
        (lambda: get_length_grouped_indices([1, 2], 2.0, seed=0), "batch_size"),
        (lambda: get_length_grouped_indices([1, 2], 2, 0, seed=0), "mega_batch_mult"),
        (lambda: get_length_grouped_indices([1, -2], 2, seed=0), "lengths"),
        (lambda: get_length_grouped_indices([[1, 2]], 2, seed=0), "lengths"),
        (lambda: get_length_grouped_indices(np.zeros((2, 2), np.int64), 2, seed=0), "lengths"),
        (lambda: get_length_grouped_indices([1.5, 2.0], 2, seed=0), "lengths"),
        (lambda: get_length_grouped_indices([1, 2], 2, seed=-1), "seed"),
        (lambda: get_length_grouped_indices([1, 2], 2, generator=generator(0), seed=0), "seed"),
        (lambda: LengthGroupedSampler([1, 2], 0, seed=0), "batch_size"),
        (lambda: LengthGroupedSampler([1, -1], 1, seed=0), "lengths"),
        (lambda: LengthGroupedSampler([1, 2], 1, seed=0).set_epoch(-1), "epoch"),
        (lambda: DistributedLengthGroupedSampler([1, 2], 1, 2, 2), "rank"),
        (lambda: DistributedLengthGroupedSampler([1, 2], 1, 2, -1), "rank"),
        (lambda: DistributedLengthGroupedSampler([1, 2], 1, 0, 0), "num_replicas"),
        (lambda: DistributedLengthGroupedSampler([1, 2], -1, 2, 0), "batch_size"),
        (lambda: DistributedLengthGroupedSampler(np.ones((3, 1), int), 1, 2, 0), "lengths"),
        (lambda: DistributedLengthGroupedSampler([1, 2], 1, 2, 0, rng="random"), "rng"),
    ],
)
def test_bad_arguments_raise_config_error_naming_the_field(call, field):
    with pytest.raises(ConfigError, match=field):
        call()


def test_a_list_of_ints_is_read_like_the_array():
    """A list of Python ints takes the array.array route; other lists (numpy ints first, bools,
    floats, ints beyond int64) take numpy's, which refuses all but numpy ints."""
    lengths = np.random.default_rng(7).integers(0, 3000, 2000)
    expected = length_grouped_order(lengths, 8, seed=3).tolist()
    assert get_length_grouped_indices(lengths.tolist(), 8, seed=3) == expected
    assert get_length_grouped_indices(list(lengths), 8, seed=3) == expected  # numpy ints
    assert hf.get_length_grouped_indices(lengths.tolist(), 8, generator=generator(2)) == (
        get_length_grouped_indices(lengths.tolist(), 8, generator=generator(2))
    )
    for bad in ([True, False], [3, 2.5], [3, 2**64], [3, "4"], [3, -1]):
        with pytest.raises(ConfigError, match="lengths"):
            get_length_grouped_indices(bad, 2, seed=0)


@pytest.mark.parametrize("batch_size, mult", [(2**62, None), (2**63 - 1, None), (2**40, 2**40), (10**6, 7)])
def test_a_megabatch_larger_than_the_dataset_is_one_megabatch(batch_size, mult):
    """batch_size * mega_batch_mult past the lengths used to allocate (or overflow) a megabatch that
    size: a numpy ValueError. One megabatch of everything is what it means."""
    lengths = np.random.default_rng(3).integers(1, 500, 1000)
    expected = length_grouped_order(lengths, len(lengths), 1, seed=7)
    assert np.array_equal(length_grouped_order(lengths, batch_size, mult, seed=7), expected)
