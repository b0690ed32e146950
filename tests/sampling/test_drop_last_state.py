"""A PretrainingSampler that keeps the final partial batch (drop_last=False) says so in its state, so a sampler
rebuilt from the state (resume, trace, where, audit) keeps that last step too; states without the key (every
state saved before it, and drop_last=True ones) read as drop_last=True, unchanged."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tokenport.errors import ConfigError, TokenportError
from tokenport.integrations.samplers import sampler_from_state
from tokenport.sampling import PretrainingSampler


class _Sized:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def _batches(sampler) -> list[list[int]]:
    return [list(batch) for batch in sampler]


@pytest.mark.parametrize("drop_last", [True, False])
def test_a_state_rebuilds_the_sampler_it_came_from(drop_last):
    saved = PretrainingSampler(29, 9, 3, 0, 3, drop_last=drop_last)
    state = saved.state_dict()
    assert ("drop_last" in state) == (not drop_last)
    for rank in range(3):
        rebuilt = sampler_from_state(state, rank, _Sized(29))
        rebuilt.auto_advance = True
        expected = _batches(PretrainingSampler(29, 9, 3, rank, 3, drop_last=drop_last))
        assert rebuilt.drop_last == drop_last and _batches(rebuilt) == expected
    assert len(expected) == (2 if drop_last else 3)  # the final partial global batch: its own step


def test_an_older_state_reads_unchanged_and_a_mismatch_is_refused():
    old = {"consumed_samples": 0, "sampler": 1, "total_samples": 29, "micro_batch_size": 3, "data_parallel_size": 3}
    old["fingerprint"] = PretrainingSampler(29, 0, 3, 0, 3).state_dict()["fingerprint"]  # what it always was
    assert sampler_from_state(old, 0, _Sized(29)).drop_last
    keeping = PretrainingSampler(29, 0, 3, 0, 3, drop_last=False)
    with pytest.raises(ConfigError, match="drop_last"):
        keeping.load_state_dict(old)
    with pytest.raises(ConfigError, match="drop_last"):
        PretrainingSampler(29, 0, 3, 0, 3).load_state_dict(keeping.state_dict())
    assert keeping.consumed_samples == 0


def test_every_mutation_of_a_drop_last_state_is_refused_or_read():
    from tests._support.mutate import mutations

    sampler = PretrainingSampler(29, 9, 3, 0, 3, drop_last=False)
    state = sampler.state_dict()
    for label, data in mutations(json.dumps(state)):
        target = PretrainingSampler(29, 0, 3, 0, 3, drop_last=False)
        try:
            target.load_state_dict(json.loads(data))
        except TokenportError:
            assert target.consumed_samples == 0, label  # a refused state changes nothing
            continue
        except (ValueError, UnicodeDecodeError):  # not JSON at all: json's own refusal, before tokenport reads it
            continue
        # read: a document the writer could have written, differing at most in its position
        assert target.state_dict() == {**state, "consumed_samples": target.consumed_samples}, label
        assert target.drop_last is False, label


def test_random_calls_match_a_shadow_model_and_a_refused_call_changes_nothing():
    rng = np.random.default_rng(5)
    for _ in range(20):
        total, mbs, size = int(rng.integers(5, 40)), int(rng.integers(1, 4)), int(rng.integers(1, 4))
        drop_last = bool(rng.integers(2))
        sampler = PretrainingSampler(total, 0, mbs, 0, size, drop_last=drop_last, auto_advance=False)
        consumed = 0  # the model: the position; the configuration never changes
        for _ in range(30):
            call = int(rng.integers(3))
            if call == 0:  # advance by a step (the last partial step when kept)
                step = min(mbs * size, total - consumed)
                if consumed < total:
                    sampler.advance()
                    consumed += step
            elif call == 1:  # a state of this configuration at a random position: read
                at = int(rng.integers(0, total + 1))
                sampler.load_state_dict(PretrainingSampler(total, at, 1, 0, 1, drop_last=drop_last).state_dict())
                consumed = at
            else:  # a state of the other drop_last: refused, nothing changes
                other = PretrainingSampler(total, int(rng.integers(0, total + 1)), 1, 0, 1, drop_last=not drop_last)
                with pytest.raises(ConfigError, match="drop_last"):
                    sampler.load_state_dict(other.state_dict())
            assert sampler.consumed_samples == consumed and sampler.drop_last == drop_last
            assert len(sampler) == len(PretrainingSampler(total, consumed, mbs, 0, size, drop_last=drop_last))
