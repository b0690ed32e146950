"""Pretraining samplers: Megatron-LM parity, exact and elastic resume, state checks, bad input."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tokenport.errors import ConfigError
from tokenport.sampling.pretraining import PretrainingSampler, RandomSampler

torch = pytest.importorskip("torch")


# --- Megatron-LM's logic, for comparison --------------------------------------------------------
# Written from megatron/training/datasets/data_samplers.py (MegatronPretrainingSampler and
# MegatronPretrainingRandomSampler), step by step, with Python lists as Megatron does.


def megatron_sequential(total, consumed, mbs, rank, dp, drop_last=True):
    """Megatron-LM's logic, for comparison: MegatronPretrainingSampler.__iter__."""
    batch = []
    start_idx, end_idx = rank * mbs, rank * mbs + mbs
    out = []
    for idx in range(consumed, total):
        batch.append(idx)
        if len(batch) == mbs * dp:
            out.append(batch[start_idx:end_idx])
            batch = []
    if len(batch) > 0 and not drop_last:
        out.append(batch[start_idx:end_idx])
    return out


class MegatronRandomOracle:
    """Megatron-LM's logic, for comparison: MegatronPretrainingRandomSampler (one __iter__ = rest of an epoch)."""

    def __init__(self, total, consumed, mbs, rank, dp, data_sharding):
        self.total_samples, self.consumed_samples = total, consumed
        self.micro_batch_size, self.data_parallel_rank, self.data_parallel_size = mbs, rank, dp
        self.data_sharding = data_sharding
        self.micro_batch_times_data_parallel_size = mbs * dp
        self.last_batch_size = total % (mbs * dp)

    def __iter__(self):
        active_total_samples = self.total_samples - self.last_batch_size
        self.epoch = self.consumed_samples // active_total_samples
        current_epoch_samples = self.consumed_samples % active_total_samples
        assert current_epoch_samples % self.micro_batch_times_data_parallel_size == 0
        if self.data_sharding:
            bucket_size = (self.total_samples // self.micro_batch_times_data_parallel_size) * self.micro_batch_size
            bucket_offset = current_epoch_samples // self.data_parallel_size
            start_idx = self.data_parallel_rank * bucket_size
            g = torch.Generator()
            g.manual_seed(self.epoch)
            random_idx = torch.randperm(bucket_size, generator=g).tolist()
            idx_range = [start_idx + x for x in random_idx[bucket_offset:]]
        else:
            full_bucket_size = (self.total_samples // self.micro_batch_size) * self.micro_batch_size
            full_bucket_offset = current_epoch_samples
            g = torch.Generator()
            g.manual_seed(self.epoch)
            idx_range_total = torch.randperm(full_bucket_size, generator=g).tolist()
            idx_range_active = idx_range_total[full_bucket_offset:]
            idx_range = idx_range_active[self.data_parallel_rank :: self.data_parallel_size]
        batch = []
        for idx in idx_range:
            batch.append(idx)
            if len(batch) == self.micro_batch_size:
                self.consumed_samples += self.micro_batch_times_data_parallel_size
                yield batch
                batch = []


# --- helpers ------------------------------------------------------------------------------------


def epochs(sampler, count):
    """Iterate ``count`` times (Megatron's cyclic_iter), returning all micro-batches; checks ``len`` on ours."""
    out = []
    for _ in range(count):
        expected = len(sampler) if hasattr(sampler, "__len__") else None
        batches = list(iter(sampler))
        assert expected is None or len(batches) == expected
        out.extend(batches)
    return out


def global_stream(make, mbs, dp, steps):
    """Return ``steps`` global batches: each the concatenation of the ranks' micro-batches in rank order."""
    per_rank = [list(itertools.islice(cycle(make(mbs, rank, dp)), steps)) for rank in range(dp)]
    assert len({len(batches) for batches in per_rank}) == 1  # every rank takes the same number of steps
    return [sum((per_rank[rank][step] for rank in range(dp)), []) for step in range(len(per_rank[0]))]


def cycle(sampler):
    """Yield micro-batches forever (or until a sequential sampler runs dry)."""
    while True:
        empty = True
        for batch in sampler:
            empty = False
            yield batch
        if empty:
            return


def layouts():
    """Argument combinations: (total, mbs, dp)."""
    rng = np.random.default_rng(5)
    cases = [(1, 1, 1), (7, 1, 1), (8, 2, 2), (10, 2, 2), (13, 2, 3), (64, 4, 2), (100, 3, 4), (37, 5, 2)]
    # mbs < dp with a large remainder: Megatron's strided deal gives low ranks an extra micro-batch.
    cases += [(11, 1, 4), (29, 2, 5), (47, 1, 8)]
    cases += [(int(rng.integers(12, 400)), int(rng.integers(1, 6)), int(rng.integers(1, 5))) for _ in range(12)]
    return [c for c in cases if c[0] >= c[1] * c[2]]


# --- Megatron-LM parity -------------------------------------------------------------------------


@pytest.mark.parametrize("total,mbs,dp", layouts() + [(5, 4, 2), (9, 4, 2)])
@pytest.mark.parametrize("drop_last", [True, False])
def test_sequential_equals_megatron(total, mbs, dp, drop_last):
    for consumed in sorted({0, 1, mbs * dp, total // 2, total - 1, total} - set(range(total + 1, 99))):
        for rank in range(dp):
            sampler = PretrainingSampler(total, consumed, mbs, rank, dp, drop_last)
            got = list(sampler)
            assert got == megatron_sequential(total, consumed, mbs, rank, dp, drop_last)
            assert len(got) == len(PretrainingSampler(total, consumed, mbs, rank, dp, drop_last))
            expected_end = total if not drop_last else consumed + (total - consumed) // (mbs * dp) * mbs * dp
            assert sampler.consumed_samples == expected_end


@pytest.mark.parametrize("total,mbs,dp", layouts())
@pytest.mark.parametrize("data_sharding", [True, False])
def test_random_compat_equals_megatron(total, mbs, dp, data_sharding):
    gbs = mbs * dp
    active = total - total % gbs
    for consumed in sorted({0, gbs, (active // gbs // 2) * gbs, active, active + gbs}):
        for rank in range(dp):
            ours = RandomSampler(total, consumed, mbs, rank, dp, data_sharding=data_sharding, megatron_compat=True)
            oracle = MegatronRandomOracle(total, consumed, mbs, rank, dp, data_sharding)
            first_len = len(ours)
            got = epochs(ours, 3)
            assert got == epochs(oracle, 3)
            assert first_len == len(list(MegatronRandomOracle(total, consumed, mbs, rank, dp, data_sharding)))
            assert ours.consumed_samples == oracle.consumed_samples
            assert all(len(batch) == mbs for batch in got)


# --- the default (numpy) random order -----------------------------------------------------------


@pytest.mark.parametrize("total,mbs,dp", layouts())
@pytest.mark.parametrize("data_sharding", [True, False])
def test_random_default_epoch_is_a_sample_of_distinct_ids(total, mbs, dp, data_sharding):
    gbs = mbs * dp
    active = total - total % gbs
    per_rank = [list(RandomSampler(total, 0, mbs, rank, dp, seed=3, data_sharding=data_sharding)) for rank in range(dp)]
    assert {len(batches) for batches in per_rank} == {active // gbs}
    ids = np.array([i for batches in per_rank for batch in batches for i in batch])
    assert len(ids) == active and len(np.unique(ids)) == active
    assert ids.min() >= 0 and ids.max() < total
    if data_sharding:
        bucket = (total // gbs) * mbs  # Megatron's per-rank bucket
        for rank, batches in enumerate(per_rank):
            flat = np.array(batches).ravel()
            assert flat.min() >= rank * bucket and flat.max() < (rank + 1) * bucket


def test_random_default_depends_on_seed_and_epoch_and_covers_the_tail():
    a = RandomSampler(1003, 0, 4, 0, 2, seed=1, data_sharding=False)
    first, second = list(a), list(a)
    assert first != second  # a new epoch, a new order
    assert list(RandomSampler(1003, 0, 4, 0, 2, seed=2, data_sharding=False)) != first
    assert list(RandomSampler(1003, 0, 4, 0, 2, seed=1, data_sharding=False)) == first
    # Without sharding the unused tail changes every epoch, so every id is eventually drawn.
    seen = {i for batch in epochs(RandomSampler(1003, 0, 4, 0, 1, data_sharding=False), 20) for i in batch}
    assert seen == set(range(1003))
    sharded = RandomSampler(1003, 0, 4, 1, 2, seed=1)
    assert list(sharded) != list(sharded)


def test_random_default_does_not_import_torch():
    code = textwrap.dedent(
        """
        import sys
        from tokenport.sampling.pretraining import RandomSampler
        for sharding in (True, False):
            s = RandomSampler(1000, 0, 4, 1, 2, seed=7, data_sharding=sharding)
            assert len(list(s)) == 125
            s.load_state_dict(s.state_dict())
        assert "torch" not in sys.modules, "torch was imported"
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- exact resume -------------------------------------------------------------------------------


def random_makers():
    """Factories (total, consumed, mbs, rank, dp) -> sampler, for every random mode."""
    return {
        f"sharding={s},compat={c}": (
            lambda total, consumed, mbs, rank, dp, s=s, c=c: RandomSampler(
                total, consumed, mbs, rank, dp, seed=0 if c else 11, data_sharding=s, megatron_compat=c
            )
        )
        for s in (True, False)
        for c in (True, False)
    }


MAKERS = {
    "sequential": lambda total, consumed, mbs, rank, dp: PretrainingSampler(total, consumed, mbs, rank, dp, False)
}
MAKERS.update(random_makers())


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_exact_resume_equals_uninterrupted_run(name):
    make = MAKERS[name]
    total, mbs, dp = 203, 3, 2
    for rank in range(dp):
        uninterrupted = list(itertools.islice(cycle(make(total, 0, mbs, rank, dp)), 150))
        for stop in (0, 1, 17, 33, 34, 35, 67, 100):
            first = make(total, 0, mbs, rank, dp)
            head = list(itertools.islice(cycle(first), stop))
            state = first.state_dict()
            resumed = make(total, 0, mbs, rank, dp)
            resumed.load_state_dict(state)
            tail = list(itertools.islice(cycle(resumed), 150 - stop))
            assert head + tail == uninterrupted, (name, rank, stop)


def test_manual_advance_counts_trained_steps():
    for make in MAKERS.values():
        auto = make(97, 0, 2, 1, 3)
        stream = list(itertools.islice(cycle(auto), 40))
        manual = make(97, 0, 2, 1, 3)
        manual.auto_advance = False
        taken = list(itertools.islice(iter(manual), 5))  # a DataLoader fetched 5 batches ahead ...
        assert manual.consumed_samples == 0
        manual.advance()  # ... but one step was trained
        manual.advance(6)
        assert manual.consumed_samples == 12
        resumed = make(97, 0, 2, 1, 3)
        resumed.load_state_dict(manual.state_dict())
        assert taken[:2] + list(itertools.islice(cycle(resumed), 38)) == stream


def test_dataloader_batch_sampler():
    from torch.utils.data import DataLoader

    data = list(range(100, 200))
    for sampler in (PretrainingSampler(100, 8, 4, 1, 2), RandomSampler(100, 8, 4, 1, 2, seed=5)):
        expected = [[data[i] for i in batch] for batch in type(sampler)(**_args(sampler))]
        got = [t.tolist() for t in DataLoader(data, batch_sampler=sampler)]
        assert got == expected and len(got) == 11


def _args(sampler):
    """Constructor arguments reproducing ``sampler`` at consumed_samples=8."""
    args = dict(
        total_samples=sampler.total_samples,
        consumed_samples=8,
        micro_batch_size=sampler.micro_batch_size,
        data_parallel_rank=sampler.data_parallel_rank,
        data_parallel_size=sampler.data_parallel_size,
    )
    if isinstance(sampler, RandomSampler):
        args["seed"] = sampler.seed
    return args


# --- elastic resume -----------------------------------------------------------------------------


ELASTIC = {
    "sequential": lambda mbs, rank, dp, consumed=0: PretrainingSampler(1001, consumed, mbs, rank, dp),
    "random-sharded": lambda mbs, rank, dp, consumed=0: RandomSampler(1001, consumed, mbs, rank, dp, seed=4),
    "random-global": lambda mbs, rank, dp, consumed=0: RandomSampler(
        1001, consumed, mbs, rank, dp, seed=4, data_sharding=False
    ),
}


@pytest.mark.parametrize("name", sorted(ELASTIC))
def test_elastic_global_stream_and_resume(name):
    make = ELASTIC[name]
    steps = 200  # 125 global batches of 8 per epoch (sequential: 125 then dry)
    stream = global_stream(make, 4, 2, steps)
    assert len(stream) == (125 if name == "sequential" else steps)
    assert global_stream(make, 2, 4, steps) == stream
    assert global_stream(make, 8, 1, steps) == stream
    assert global_stream(make, 1, 8, steps) == stream
    # Run on dp=2 for 50 steps, save on every rank, resume on dp=4 from rank 0's state.
    old = [make(4, rank, 2) for rank in range(2)]
    for sampler in old:
        list(itertools.islice(iter(sampler), 50))
    states = [sampler.state_dict() for sampler in old]
    assert states[0] == states[1] and states[0]["consumed_samples"] == 400
    new = [make(2, rank, 4) for rank in range(4)]
    for sampler in new:
        sampler.load_state_dict(states[0])
    per_rank = [list(itertools.islice(cycle(sampler), steps - 50)) for sampler in new]
    resumed = [sum((per_rank[rank][i] for rank in range(4)), []) for i in range(len(per_rank[0]))]
    assert stream[:50] + resumed == stream


@pytest.mark.parametrize("data_sharding", [True, False])
def test_megatron_compat_rejects_elastic_resume(data_sharding):
    old = RandomSampler(1000, 0, 4, 0, 2, data_sharding=data_sharding, megatron_compat=True)
    list(itertools.islice(iter(old), 10))
    same = RandomSampler(1000, 0, 4, 1, 2, data_sharding=data_sharding, megatron_compat=True)
    same.load_state_dict(old.state_dict())  # same layout, another rank: fine
    assert same.consumed_samples == 80
    new = RandomSampler(1000, 0, 2, 0, 4, data_sharding=data_sharding, megatron_compat=True)
    with pytest.raises(ConfigError, match="cannot resume elastically"):
        new.load_state_dict(old.state_dict())
    assert new.consumed_samples == 0


# --- state checks -------------------------------------------------------------------------------


def test_state_dict_is_a_few_ints():
    state = RandomSampler(1000, 16, 4, 0, 2, seed=9).state_dict()
    assert all(type(v) is int for v in state.values())
    assert state["consumed_samples"] == 16 and state["epoch"] == 0 and state["seed"] == 9
    assert 0 <= state["fingerprint"] < 2**63
    assert RandomSampler(1000, 1000, 2, 1, 4, seed=9).state_dict()["epoch"] == 1
    # The fingerprint ignores the layout (elastic) and the position.
    assert state["fingerprint"] == RandomSampler(1000, 0, 1, 5, 8, seed=9).state_dict()["fingerprint"]


@pytest.mark.parametrize(
    "other,field",
    [
        (dict(total_samples=1200), "total_samples"),
        (dict(micro_batch_size=2), "global_batch_size"),
        (dict(seed=10), "seed"),
        (dict(data_sharding=False), "data_sharding"),
    ],
)
def test_load_rejects_another_configuration_naming_the_field(other, field):
    args = dict(total_samples=1000, consumed_samples=0, micro_batch_size=4, data_parallel_rank=0, data_parallel_size=2)
    state = RandomSampler(**args, seed=9).state_dict()
    with pytest.raises(ConfigError, match=field):
        RandomSampler(**{**args, **other, **({"seed": 9} if "seed" not in other else {})}).load_state_dict(state)


def test_load_rejects_compat_flag_kind_and_bad_states():
    state = RandomSampler(1000, 8, 4, 0, 2).state_dict()
    with pytest.raises(ConfigError, match="megatron_compat"):
        RandomSampler(1000, 0, 4, 0, 2, megatron_compat=True).load_state_dict(state)
    with pytest.raises(ConfigError, match="RandomSampler, not a PretrainingSampler"):
        PretrainingSampler(1000, 0, 4, 0, 2).load_state_dict(state)
    with pytest.raises(ConfigError, match="fingerprint"):
        RandomSampler(1000, 0, 4, 0, 2).load_state_dict({**state, "fingerprint": state["fingerprint"] ^ 1})
    with pytest.raises(ConfigError, match="`seed`"):
        RandomSampler(1000, 0, 4, 0, 2).load_state_dict({k: v for k, v in state.items() if k != "seed"})
    with pytest.raises(ConfigError, match="epoch"):
        RandomSampler(1000, 0, 4, 0, 2).load_state_dict({**state, "epoch": 3})
    with pytest.raises(ConfigError, match="multiple of the global batch"):
        RandomSampler(1000, 0, 4, 0, 2).load_state_dict({**state, "consumed_samples": 9})
    with pytest.raises(ConfigError, match="expected the dict"):
        RandomSampler(1000, 0, 4, 0, 2).load_state_dict([1, 2])
    seq = PretrainingSampler(100, 0, 4, 0, 2).state_dict()
    with pytest.raises(ConfigError, match="past the end"):
        PretrainingSampler(100, 0, 4, 0, 2).load_state_dict({**seq, "consumed_samples": 101})
    with pytest.raises(ConfigError, match="total_samples"):
        PretrainingSampler(90, 0, 4, 0, 2).load_state_dict(seq)


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [PretrainingSampler, RandomSampler])
@pytest.mark.parametrize(
    "bad,field",
    [
        (dict(total_samples=0), "total_samples"),
        (dict(total_samples=-5), "total_samples"),
        (dict(micro_batch_size=0), "micro_batch_size"),
        (dict(micro_batch_size=-1), "micro_batch_size"),
        (dict(data_parallel_size=0), "data_parallel_size"),
        (dict(data_parallel_rank=2), "data_parallel_rank"),
        (dict(data_parallel_rank=-1), "data_parallel_rank"),
        (dict(consumed_samples=-8), "consumed_samples"),
        (dict(micro_batch_size=2.0), "micro_batch_size"),
        (dict(total_samples=True), "total_samples"),
    ],
)
def test_bad_arguments_name_the_field(cls, bad, field):
    args = dict(total_samples=100, consumed_samples=0, micro_batch_size=4, data_parallel_rank=0, data_parallel_size=2)
    with pytest.raises(ConfigError, match=field):
        cls(**{**args, **bad})


def test_bad_arguments_specific_to_each_sampler():
    with pytest.raises(ConfigError, match="consumed_samples=101 is past the end"):
        PretrainingSampler(100, 101, 4, 0, 2)
    assert list(PretrainingSampler(100, 100, 4, 0, 2)) == []  # at the end: nothing left
    with pytest.raises(ConfigError, match="consumed_samples=4 is not a multiple"):
        RandomSampler(100, 4, 4, 0, 2)
    with pytest.raises(ConfigError, match="total_samples=7 is smaller than one global batch"):
        RandomSampler(7, 0, 4, 0, 2)
    with pytest.raises(ConfigError, match="seed=3 is invalid with megatron_compat"):
        RandomSampler(100, 0, 4, 0, 2, seed=3, megatron_compat=True)
    with pytest.raises(ConfigError, match="seed"):
        RandomSampler(100, 0, 4, 0, 2, seed=-1)
    with pytest.raises(ConfigError, match="num_samples"):
        RandomSampler(100, 0, 4, 0, 2).advance(-8)
    with pytest.raises(ConfigError, match="past the end"):
        PretrainingSampler(100, 96, 4, 0, 2).advance(8)
    seq = PretrainingSampler(100, 96, 4, 0, 2)
    seq.advance()  # one step at the end consumes the 4 samples left
    assert seq.consumed_samples == 100
