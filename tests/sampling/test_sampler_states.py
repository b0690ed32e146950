"""Sampler states under random call sequences: a refused call changes nothing, the rest follow a shadow model."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest

from tokenport.errors import ConfigError, TokenportError
from tokenport.sampling import PretrainingSampler, RandomSampler, StreamSampler

TOTAL = 40

MAKERS = {
    "pretraining": lambda consumed=0: PretrainingSampler(TOTAL, consumed, 2, 1, 2, drop_last=False),
    "random": lambda consumed=0: RandomSampler(TOTAL, consumed, 2, 1, 2, seed=3),
    "stream": lambda consumed=0: StreamSampler(TOTAL, consumed, 2, 1, 2, seed=3, order="random"),
}


def _corrupt(state: dict, rng: random.Random) -> dict:
    """``state`` broken one random way: a field out of range, of another type, missing, unknown, or refingerprinted."""
    broken = copy.deepcopy(state)
    key = rng.choice(sorted(broken))
    how = rng.randrange(5)
    if how == 0:
        broken[key] = -1
    elif how == 1:
        broken[key] = str(broken[key])
    elif how == 2:
        del broken[key]
    elif how == 3:
        broken["zz_unknown"] = 1
    else:
        broken[key] = 2**64
    return broken


@pytest.mark.parametrize("kind", sorted(MAKERS))
@pytest.mark.parametrize("seed", range(3))
def test_random_sampler_calls_match_a_shadow_model(kind, seed):
    rng = random.Random(seed)
    sampler = MAKERS[kind]()
    consumed = 0
    saved: list[tuple[dict, int]] = []
    for _ in range(120):
        action = rng.choice(("batch", "advance", "save", "load", "load_bad", "load_bad"))
        before = sampler.state_dict()
        try:
            if action == "batch":  # the ids a fresh sampler at the model's position yields, then one step on
                expected = next(iter(MAKERS[kind](consumed)), None)
                assert next(iter(sampler), None) == expected
                consumed += 0 if expected is None else 4
            elif action == "advance":
                step = rng.choice((0, 4, 8))
                sampler.advance(step)
                consumed += step
            elif action == "save":
                saved.append((sampler.state_dict(), consumed))
            elif action == "load" and saved:
                state, at = rng.choice(saved)
                sampler.load_state_dict(copy.deepcopy(state))
                consumed = at
            elif action == "load_bad" and saved:
                state, _ = rng.choice(saved)
                sampler.load_state_dict(_corrupt(state, rng))
                pytest.fail("a corrupted state was accepted")
        except TokenportError:
            assert sampler.state_dict() == before, action
        assert sampler.consumed_samples == consumed, action


def test_stream_positions_past_int64_are_refused():
    """A consumed count near 2**63 would wrap the stream positions and read other ids: refused."""
    with pytest.raises(ConfigError, match="int64"):
        StreamSampler(TOTAL, 2**63 - 10, 2, 0, 2, order="sequential")
    sampler = StreamSampler(TOTAL, 0, 2, 0, 2, order="sequential")
    state = {**sampler.state_dict(), "consumed_samples": 2**63 - 1, "epoch": (2**63 - 1) // TOTAL}
    with pytest.raises(ConfigError, match="int64"):
        sampler.load_state_dict(state)
    assert sampler.consumed_samples == 0


def test_pretraining_global_stream_is_every_rank_s_ids():
    ranks = [PretrainingSampler(10, 4, 2, r, 2, drop_last=False) for r in range(2)]
    batches = [list(sampler) for sampler in ranks]
    assert ranks[0].global_stream(4, 8).tolist() == batches[0][0] + batches[1][0]
    assert ranks[0].global_stream(8, 12).tolist() == [8, 9] and ranks[0].global_stream(12, 16).size == 0
    assert np.array_equal(ranks[1].global_stream(0, 10), np.arange(10))
