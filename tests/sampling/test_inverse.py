"""The samplers' inverse order: every place of a sample id equals a forward scan of the stream."""

from __future__ import annotations

import numpy as np
import pytest

from tokenport.errors import ConfigError
from tokenport.sampling import PretrainingSampler, RandomSampler, StreamSampler
from tokenport.sampling.feistel import feistel_ids, feistel_offsets
from tokenport.sampling.inverse import epoch_length, stream_positions


def _forward(sampler, stop: int) -> np.ndarray:
    """The global stream's first ``stop`` ids, read forward (what every rank together reads)."""
    if isinstance(sampler, RandomSampler):
        epochs = -(-stop // sampler.active_samples)
        return np.concatenate([sampler.global_batches(e).reshape(-1) for e in range(epochs)])[:stop]
    if isinstance(sampler, PretrainingSampler):  # one pass; drop_last leaves the incomplete batch out
        return sampler.global_stream(0, min(stop, epoch_length(sampler)))
    return sampler.global_stream(0, stop)


def _samplers(total: int, mbs: int, dp: int, seed: int):
    yield PretrainingSampler(total, 0, mbs, 0, dp)
    yield PretrainingSampler(total, 0, mbs, 0, dp, drop_last=False)
    for sharding in (True, False):
        yield RandomSampler(total, 0, mbs, 0, dp, seed, sharding)
        yield RandomSampler(total, 0, mbs, 0, dp, 0, sharding, megatron_compat=True)
    for order in ("sequential", "random", "feistel"):
        yield StreamSampler(total, 0, mbs, 0, dp, seed, order)
    lengths = np.random.default_rng(seed).integers(1, 50, total)
    yield StreamSampler(total, 0, mbs, 0, dp, seed, "length_grouped", lengths=lengths, group_size=mbs)


@pytest.mark.parametrize("case", range(6))
def test_every_place_of_random_ids_matches_a_forward_scan(case):
    rng = np.random.default_rng(case)
    total, mbs, dp = int(rng.integers(9, 80)), int(rng.integers(1, 4)), int(rng.integers(1, 5))
    total = max(total, mbs * dp)
    for sampler in _samplers(total, mbs, dp, case):
        stop = int(rng.integers(1, 4 * total)) if not isinstance(sampler, PretrainingSampler) else total
        stream = _forward(sampler, stop)
        ids = rng.choice(total + 2, size=min(total, 7), replace=False)  # some ids past the data
        k, positions = stream_positions(sampler, ids, stop)
        expected = np.flatnonzero(np.isin(stream, ids))
        np.testing.assert_array_equal(positions, expected, err_msg=repr(sampler.state_dict()))
        np.testing.assert_array_equal(ids[k], stream[positions])
        assert epoch_length(sampler) > 0


def test_the_feistel_inverse_undoes_the_permutation_without_building_it():
    for n in (1, 2, 3, 5, 17, 1000, 4099):
        for seed, epoch in ((0, 0), (7, 3)):
            ids = feistel_ids(np.arange(n, dtype=np.int64), n, seed, epoch)
            np.testing.assert_array_equal(feistel_offsets(ids, n, seed, epoch), np.arange(n))
    n = 10**12  # a trillion-id order: a few ids inverted, nothing built
    offsets = np.array([0, 5, n - 1, 123456789012], dtype=np.int64)
    ids = feistel_ids(offsets, n, 11, 2)
    np.testing.assert_array_equal(feistel_offsets(ids, n, 11, 2), offsets)


def test_a_sampler_that_is_not_tokenports_is_refused():
    with pytest.raises(ConfigError, match="cannot be inverted; replay"):
        stream_positions(object(), np.arange(3), 10)
