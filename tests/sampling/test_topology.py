"""Resume on another topology: Megatron's samplers with a changed global batch, and real datasets end to end.

A run on dp=4 is checkpointed and resumed on 1, 2 or 8 ranks with the same, double or half
global batch; the samples fed from then on must be those of the uninterrupted run.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import tokenport as tp
from tests._support.stores import build_store, random_documents
from tokenport.blend.schedule import MixtureSchedule, Phase, build_scheduled_indices
from tokenport.errors import ConfigError
from tokenport.sampling import PretrainingSampler, RandomSampler, StreamSampler

LAYOUTS = [(gbs, dp) for gbs in (16, 32, 8) for dp in (1, 2, 8)]  # from dp=4, global batch 16


def take(samplers, steps):
    """``steps`` global batches from one sampler per rank (rank order), one ``__iter__`` per epoch."""
    per_rank = []
    for sampler in samplers:
        batches: list[list[int]] = []
        while len(batches) < steps:
            before = len(batches)
            for batch in sampler:
                batches.append(batch)
                if len(batches) == steps:
                    break
            if len(batches) == before:  # a sequential sampler ran dry
                break
        per_rank.append(batches)
    return [sum((batches[step] for batches in per_rank), []) for step in range(min(map(len, per_rank)))]


def resume_streams(make, stop, steps=60, layouts=LAYOUTS):
    """The straight dp=4 stream, and per layout the stream of a dp=4 run resumed there after ``stop`` steps."""
    straight = sum(take([make(4, rank, 4) for rank in range(4)], steps), [])
    old = [make(4, rank, 4) for rank in range(4)]
    head = sum(take(old, stop), [])
    state = json.loads(json.dumps(old[0].state_dict()))
    assert all(sampler.state_dict() == state for sampler in old)
    resumed = {}
    for gbs, dp in layouts:
        new = [make(gbs // dp, rank, dp) for rank in range(dp)]
        for sampler in new:
            sampler.load_state_dict(state)
        resumed[gbs, dp] = head + sum(take(new, (steps * 16 - len(head)) // gbs), [])
    return straight, resumed


# --- Megatron's samplers ----------------------------------------------------------------------


@pytest.mark.parametrize("drop_last", [True, False])
@pytest.mark.parametrize("stop", [0, 3, 7])
def test_sequential_resumes_with_any_global_batch(drop_last, stop):
    total = 203

    def make(mbs, rank, dp):
        return PretrainingSampler(total, 0, mbs, rank, dp, drop_last)

    straight, resumed = resume_streams(make, stop)
    for layout, stream in resumed.items():
        assert stream == list(range(len(stream))), layout
        # drop_last drops the tail that does not fill the *current* global batch
        expected = total if not drop_last else stop * 16 + (total - stop * 16) // layout[0] * layout[0]
        assert len(stream) == expected, layout
    assert straight == list(range(len(straight)))


@pytest.mark.parametrize("stop", [0, 6, 14, 20])  # 14: the end of epoch 0
def test_random_without_sharding_resumes_with_another_global_batch_when_exact(stop):
    def make(mbs, rank, dp):  # 224 samples: every global batch here divides it, no tail
        return RandomSampler(224, 0, mbs, rank, dp, seed=5, data_sharding=False)

    straight, resumed = resume_streams(make, stop)
    for layout, stream in resumed.items():
        assert len(stream) >= 60 * 16 - 32 and stream == straight[: len(stream)], layout


@pytest.mark.parametrize("compat", [False, True])
@pytest.mark.parametrize("stop", [0, 9, 14])  # 203 samples: 12 global batches of 16 an epoch
def test_random_with_sharding_resumes_on_1_2_8_ranks_with_the_same_global_batch(compat, stop):
    def make(mbs, rank, dp):
        return RandomSampler(203, 0, mbs, rank, dp, seed=0 if compat else 5, megatron_compat=compat)

    layouts = [(16, 4)] if compat else [(16, dp) for dp in (1, 2, 8)]  # Megatron's order: the saved layout only
    straight, resumed = resume_streams(make, stop, layouts=layouts)
    for layout, stream in resumed.items():
        assert len(stream) == 60 * 16 and stream == straight, layout


def test_random_refuses_a_global_batch_change_that_would_change_the_stream():
    def state(total, mbs, dp, steps, sharding):
        old = RandomSampler(total, 0, mbs, 0, dp, seed=5, data_sharding=sharding)
        take([old], steps)
        return old.state_dict()

    # data sharding: the buckets are defined by the global batch
    with pytest.raises(ConfigError, match="data_sharding=True.*global_batch_size.*StreamSampler"):
        RandomSampler(224, 0, 8, 0, 4, seed=5).load_state_dict(state(224, 4, 4, 6, True))
    # another tail: 203 - 203 % 16 = 192 samples per epoch, 203 - 203 % 32 = 192, 203 - 203 % 8 = 200
    RandomSampler(203, 0, 8, 0, 4, seed=5, data_sharding=False).load_state_dict(state(203, 4, 4, 6, False))
    with pytest.raises(ConfigError, match="would use 200 of total_samples=203 instead of 192.*StreamSampler"):
        RandomSampler(203, 0, 2, 0, 4, seed=5, data_sharding=False).load_state_dict(state(203, 4, 4, 6, False))
    # consumed 5 * 16 = 80 is not a boundary of a global batch of 32
    with pytest.raises(ConfigError, match="consumed_samples=80 is not a multiple of the new global batch"):
        RandomSampler(224, 0, 8, 0, 4, seed=5, data_sharding=False).load_state_dict(state(224, 4, 4, 5, False))
    # Megatron's own order depends on mbs and dp themselves
    compat = RandomSampler(224, 0, 4, 0, 4, megatron_compat=True, data_sharding=False)
    with pytest.raises(ConfigError, match="cannot resume elastically"):
        RandomSampler(224, 0, 8, 0, 4, megatron_compat=True, data_sharding=False).load_state_dict(compat.state_dict())


@settings(max_examples=80, deadline=None)
@given(
    total=st.integers(1, 150),
    old=st.tuples(st.integers(1, 6), st.integers(1, 4)),
    new=st.tuples(st.integers(1, 6), st.integers(1, 4)),
    steps=st.integers(0, 30),
    sharding=st.booleans(),
)
def test_random_accepts_a_layout_change_only_when_the_stream_goes_on_exactly(total, old, new, steps, sharding):
    def ranks(mbs, dp):
        return [RandomSampler(total, 0, mbs, rank, dp, seed=3, data_sharding=sharding) for rank in range(dp)]

    assume(total >= max(old[0] * old[1], new[0] * new[1]))
    straight = sum(take(ranks(*old), steps + 40), [])
    before = ranks(*old)
    take(before, steps)
    state = before[0].state_dict()
    after = ranks(*new)
    gbs, saved = new[0] * new[1], old[0] * old[1]
    active = total - total % gbs
    exact = gbs == saved or (not sharding and active == total - total % saved and state["consumed_samples"] % gbs == 0)
    if not exact:
        with pytest.raises(ConfigError, match="StreamSampler"):
            after[0].load_state_dict(state)
        return
    for sampler in after:
        sampler.load_state_dict(state)
    consumed = state["consumed_samples"]
    tail = sum(take(after, 40 * saved // gbs), [])
    assert tail == straight[consumed : consumed + len(tail)]


# --- real datasets, end to end ----------------------------------------------------------------


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Two small uint16 token stores written by tokenport's writer (documents of 5..80 tokens, EOD 2)."""
    rng = np.random.default_rng(0)
    out = []
    for name, documents in (("prose", 40), ("code", 90)):
        prefix = tmp_path_factory.mktemp("topology") / name
        build_store(prefix, random_documents(rng, documents, tokens=(3, 1000), length=(5, 80), eod=2), dtype=np.uint16)
        out.append(tp.IndexedDataset(prefix))
    return out


def gpt(store, samples):
    """A GPTDataset of ``samples`` samples of 16 tokens over all documents of ``store``."""
    return tp.GPTDataset(store, np.arange(len(store)), samples, tp.GPTSampleConfig(16, 2), 1)


def datasets(stores):
    """name -> (dataset, sample lengths for length grouping, orders to check)."""
    prose, code = stores
    blend = tp.BlendedDataset([gpt(prose, 150), gpt(code, 300)], [0.3, 0.7], 203)
    schedule = MixtureSchedule((Phase(0, (0.8, 0.2)), Phase(100, (0.8, 0.2), (0.1, 0.9), 180), Phase(180, (0.1, 0.9))))
    scheduled = tp.BlendedDataset.from_indices(
        [gpt(prose, 200), gpt(code, 300)], *build_scheduled_indices(schedule, 203)
    )
    packed = tp.PackedDataset(code, 96, seed=3)
    packed_lengths = np.add.reduceat(packed.piece_length, packed.bin_starts[:-1])[packed.order]
    return {
        "gpt": (gpt(code, 203), None, ("random", "feistel")),
        "blend": (blend, None, ("random",)),
        "schedule": (scheduled, None, ("sequential",)),  # a schedule follows the sample ids: read them in order
        "packed": (packed, packed_lengths, ("random", "length_grouped")),
    }


def tokens_of(dataset, ids):
    """The tokens of samples ``ids`` (one row each)."""
    return np.stack([np.asarray(dataset[i]["tokens"]) for i in ids]) if ids else np.zeros((0, 0), np.int64)


@pytest.mark.parametrize("name", ["gpt", "blend", "schedule", "packed"])
def test_samples_fed_across_a_topology_change_equal_the_straight_run(stores, name):
    from torch.utils.data import DataLoader

    dataset, lengths, orders = datasets(stores)[name]
    total = len(dataset)
    for order in orders:
        grouping = dict(lengths=lengths, group_size=4) if order == "length_grouped" else {}

        def make(mbs, rank, dp, order=order, grouping=grouping):
            return StreamSampler(total, 0, mbs, rank, dp, seed=11, order=order, **grouping)

        def feed(samplers, steps, workers):
            """Tokens of ``steps`` global batches through one DataLoader per rank, one pass per epoch."""
            per_rank = []
            for sampler in samplers:
                batches: list[np.ndarray] = []
                while len(batches) < steps:
                    loader = DataLoader(dataset, batch_sampler=sampler, num_workers=workers, collate_fn=list)
                    for batch in loader:
                        batches.append(np.stack([np.asarray(sample["tokens"]) for sample in batch]))
                        if len(batches) == steps:
                            break
                per_rank.append(batches)
            return np.concatenate([np.concatenate([b[s] for b in per_rank]) for s in range(steps)])

        straight = feed([make(4, rank, 4) for rank in range(4)], 30, 0)  # 480 samples: two epochs and more
        old = [make(4, rank, 4) for rank in range(4)]
        head = feed(old, 16, 0)  # 256 samples: past an epoch end (datasets of 203 to 240 samples, or 42 packed)
        state = json.loads(json.dumps(old[0].state_dict()))
        for gbs, dp, workers in ((32, 2, 2), (8, 8, 0), (16, 1, 0)):
            new = [make(gbs // dp, rank, dp) for rank in range(dp)]
            for sampler in new:
                sampler.load_state_dict(state)
            tail = feed(new, (480 - 16 * 16) // gbs, workers)
            assert np.array_equal(np.concatenate([head, tail]), straight), (name, order, gbs, dp)
        ids = make(1, 0, 1).global_stream(0, 480)
        assert np.array_equal(straight, tokens_of(dataset, ids.tolist())), (name, order)


def test_stateful_loader_with_a_stream_sampler_resumes_on_another_topology(stores):
    blend = datasets(stores)["blend"][0]
    total = len(blend)

    def loaders(mbs, dp, workers=0):
        return [
            tp.StatefulLoader(
                blend, StreamSampler(total, 0, mbs, rank, dp, seed=2), num_workers=workers, collate_fn=list
            )
            for rank in range(dp)
        ]

    def feed(ranks, steps):
        """Tokens of ``steps`` global batches, each loader looping again at the end of an epoch."""
        per_rank = []
        for loader in ranks:
            batches: list[np.ndarray] = []
            while len(batches) < steps:
                for batch in loader:
                    batches.append(np.stack([sample["tokens"] for sample in batch]))
                    if len(batches) == steps:
                        break
            per_rank.append(batches)
        return np.concatenate([np.concatenate([b[s] for b in per_rank]) for s in range(steps)])

    old = loaders(4, 4)
    head = feed(old, 16)  # 256 samples, past the end of epoch 0
    state = old[0].state_dict()
    assert old[0].consumed_samples == 256 and old[0].epoch == 1
    new = loaders(16, 2, workers=2)  # 2 ranks, global batch 32
    for loader in new:
        loader.load_state_dict(state)
    tail = feed(new, 7)
    ids = StreamSampler(total, 0, 1, 0, 1, seed=2).global_stream(0, 256 + 7 * 32)
    assert np.array_equal(np.concatenate([head, tail]), tokens_of(blend, ids.tolist()))
