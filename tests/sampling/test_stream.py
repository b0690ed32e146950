"""StreamSampler: the global stream, resume on any layout and global batch, state checks, bad input."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenport.errors import ConfigError
from tokenport.sampling import PretrainingSampler, RandomSampler, StreamSampler, get_length_grouped_indices

TOTAL = 203
LENGTHS = np.random.default_rng(3).integers(1, 500, TOTAL)


def make(order, mbs, rank, dp, consumed=0, total=TOTAL, seed=7):
    """A StreamSampler of ``order`` on this layout (length grouping: groups of 4 over LENGTHS)."""
    grouping = dict(lengths=LENGTHS[:total], group_size=4) if order == "length_grouped" else {}
    return StreamSampler(total, consumed, mbs, rank, dp, seed=seed, order=order, **grouping)


def take(samplers, steps):
    """``steps`` global batches from one sampler per rank (rank order), one ``__iter__`` per epoch.

    A sampler with ``auto_advance=False`` is advanced after each batch, as a training loop does.
    """
    per_rank = []
    for sampler in samplers:
        batches: list[list[int]] = []
        while len(batches) < steps:
            expected, before = len(sampler), len(batches)
            for batch in sampler:
                batches.append(batch)
                if not sampler.auto_advance:
                    sampler.advance()
                if len(batches) == steps:
                    break
            else:
                assert len(batches) - before == expected
        per_rank.append(batches)
    return [sum((batches[step] for batches in per_rank), []) for step in range(steps)]


ORDERS = ("random", "sequential", "length_grouped", "feistel")


# --- the stream -----------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ORDERS)
def test_each_epoch_is_an_order_of_all_ids_and_the_stream_is_their_concatenation(order):
    sampler = make(order, 1, 0, 1)
    epochs = [sampler.epoch_order(e) for e in range(3)]
    for ids in epochs:
        assert sorted(ids.tolist()) == list(range(TOTAL))
    assert sampler.global_stream(0, 3 * TOTAL).tolist() == np.concatenate(epochs).tolist()
    assert sampler.global_stream(150, 420).tolist() == np.concatenate(epochs)[150:420].tolist()
    if order == "sequential":
        assert epochs[0].tolist() == list(range(TOTAL))
    else:
        assert epochs[0].tolist() != epochs[1].tolist()  # a fresh order each epoch
    if order == "random":
        assert epochs[1].tolist() == np.random.default_rng([7, 1]).permutation(TOTAL).tolist()
    if order == "length_grouped":  # get_length_grouped_indices' order, seeded with (seed, epoch)
        assert epochs[2].tolist() == get_length_grouped_indices(LENGTHS, 4, seed=(7, 2))


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("mbs,dp", [(1, 1), (4, 1), (2, 4), (3, 5), (16, 8), (60, 5)])
def test_ranks_cut_the_same_stream_into_global_batches(order, mbs, dp):
    gbs = mbs * dp
    steps = 3 * TOTAL // gbs + 2  # three epochs and more: batches straddle epoch ends
    got = take([make(order, mbs, rank, dp) for rank in range(dp)], steps)
    stream = make(order, 1, 0, 1).global_stream(0, steps * gbs)
    assert np.concatenate(got).tolist() == stream.tolist()


def test_one_iter_ends_with_the_batch_that_crosses_the_epoch_end():
    sampler = make("random", 8, 1, 2)  # gbs 16, 203 = 12 * 16 + 11
    assert len(sampler) == 13
    first = list(sampler)
    assert len(first) == 13 and sampler.consumed_samples == 208 and sampler.epoch == 1
    assert len(sampler) == 13  # epoch 1 ends at 406: batches start at 208, 224, ..., 400
    second = list(sampler)
    assert len(second) == 13 and sampler.consumed_samples == 416 and sampler.epoch == 2
    assert second[-1] == sampler.global_stream(400, 416)[8:].tolist()  # rank 1's half of the straddling batch
    assert len(sampler) == 13  # epoch 2 ends at 609: batches start at 416, ..., 608
    straddling = sampler.global_stream(400, 416).tolist()
    assert straddling == sampler.epoch_order(1)[197:].tolist() + sampler.epoch_order(2)[:10].tolist()


# --- resume on another topology ----------------------------------------------------------------


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("stop", [0, 5, 13, 26])  # 13: just past the end of epoch 0
def test_resume_from_dp4_on_1_2_8_ranks_with_the_same_half_or_double_global_batch(order, stop):
    mbs, dp = 4, 4  # global batch 16
    straight = np.concatenate(take([make(order, mbs, rank, dp) for rank in range(dp)], 60))
    old = [make(order, mbs, rank, dp) for rank in range(dp)]
    head = take(old, stop)
    states = [json.loads(json.dumps(s.state_dict())) for s in old]
    assert all(state == states[0] for state in states)
    consumed = states[0]["consumed_samples"]
    assert consumed == stop * 16
    for gbs in (16, 32, 8):
        for new_dp in (1, 2, 8):
            new = [make(order, gbs // new_dp, rank, new_dp) for rank in range(new_dp)]
            for sampler in new:
                sampler.load_state_dict(states[0])
            tail = np.concatenate(take(new, (60 * 16 - consumed) // gbs))
            resumed = np.concatenate([*head, tail]).tolist()
            assert len(resumed) >= 60 * 16 - 16 and resumed == straight[: len(resumed)].tolist(), (gbs, new_dp)


@settings(max_examples=60, deadline=None)
@given(
    total=st.integers(1, 120),
    old=st.tuples(st.integers(1, 9), st.integers(1, 6)),
    new=st.tuples(st.integers(1, 9), st.integers(1, 6)),
    steps=st.integers(0, 40),
    order=st.sampled_from(ORDERS),
    auto=st.booleans(),
)
def test_any_layout_resumes_the_stream_exactly(total, old, new, steps, order, auto):
    reference = make(order, 1, 0, 1, total=total)
    samplers = [make(order, old[0], rank, old[1], total=total) for rank in range(old[1])]
    for sampler in samplers:
        sampler.auto_advance = auto
    head = take(samplers, steps)
    consumed = steps * old[0] * old[1]
    assert samplers[0].consumed_samples == consumed
    assert list(itertools.chain(*head)) == reference.global_stream(0, consumed).tolist()
    assert np.concatenate([np.zeros(0, np.int64), *samplers[0].consumed_stream()]).tolist() == list(
        itertools.chain(*head)
    )
    resumed = [make(order, new[0], rank, new[1], total=total) for rank in range(new[1])]
    for sampler in resumed:
        sampler.load_state_dict(samplers[0].state_dict())
    tail = take(resumed, 7)
    gbs = new[0] * new[1]
    assert list(itertools.chain(*tail)) == reference.global_stream(consumed, consumed + 7 * gbs).tolist()


def test_manual_advance_and_any_consumed_count():
    sampler = StreamSampler(50, 0, 3, 0, 2, auto_advance=False)
    batches = list(itertools.islice(iter(sampler), 4))  # a DataLoader fetched ahead ...
    assert sampler.consumed_samples == 0
    sampler.advance()  # ... one step was trained
    sampler.advance(5)
    assert sampler.consumed_samples == 11
    resumed = StreamSampler(50, 0, 2, 1, 3)  # another layout, at a count no batch size divides
    resumed.load_state_dict(sampler.state_dict())
    assert next(iter(resumed)) == sampler.global_stream(13, 15).tolist()
    assert batches[0] == sampler.global_stream(0, 3).tolist()


def test_dataloader_with_workers_yields_the_same_batches():
    from torch.utils.data import DataLoader

    data = list(range(1000, 1203))
    for workers in (0, 2):
        sampler = make("length_grouped", 4, 1, 2, consumed=40)
        expected = [[data[i] for i in batch] for batch in make("length_grouped", 4, 1, 2, consumed=40)]
        got = [t.tolist() for t in DataLoader(data, batch_sampler=sampler, num_workers=workers)]
        assert got == expected and len(got) == len(make("length_grouped", 4, 1, 2, consumed=40))


# --- state checks -------------------------------------------------------------------------------


def test_state_dict_is_a_few_ints_and_ignores_the_layout():
    state = make("length_grouped", 4, 0, 2, consumed=210).state_dict()
    assert all(type(v) is int for v in state.values())
    assert state["consumed_samples"] == 210 and state["epoch"] == 1 and state["seed"] == 7
    assert state["fingerprint"] == make("length_grouped", 1, 5, 8).state_dict()["fingerprint"]
    # the same lengths in another dtype are the same order
    same = StreamSampler(TOTAL, 0, 1, 0, 1, 7, "length_grouped", lengths=LENGTHS.astype(np.uint16), group_size=4)
    same.load_state_dict(state)
    assert same.consumed_samples == 210


@pytest.mark.parametrize(
    "other,field",
    [
        (dict(total_samples=202, lengths=LENGTHS[:202]), "total_samples"),
        (dict(seed=8), "seed"),
        (dict(group_size=8), "group_size"),
        (dict(mega_batch_mult=3), "mega_batch_mult"),
        (dict(lengths=LENGTHS + 1), "lengths_fingerprint"),
    ],
)
def test_load_refuses_another_order_naming_the_field(other, field):
    args = dict(total_samples=TOTAL, consumed_samples=0, micro_batch_size=4, data_parallel_rank=0, data_parallel_size=2)
    grouping = dict(seed=7, order="length_grouped", lengths=LENGTHS, group_size=4)
    state = StreamSampler(**args, **grouping).state_dict()
    sampler = StreamSampler(**{**args, **grouping, **other})
    with pytest.raises(ConfigError, match=field):
        sampler.load_state_dict(state)
    assert sampler.consumed_samples == 0


def test_load_refuses_another_order_kind_and_bad_states():
    state = make("random", 4, 0, 2, consumed=30).state_dict()
    with pytest.raises(ConfigError, match="order"):
        make("sequential", 4, 0, 2).load_state_dict(state)
    with pytest.raises(ConfigError, match="StreamSampler, not a RandomSampler"):
        RandomSampler(TOTAL, 0, 4, 0, 2).load_state_dict(state)
    with pytest.raises(ConfigError, match="RandomSampler, not a StreamSampler"):
        make("random", 4, 0, 2).load_state_dict(RandomSampler(TOTAL, 0, 4, 0, 2).state_dict())
    with pytest.raises(ConfigError, match="PretrainingSampler, not a StreamSampler"):
        make("sequential", 4, 0, 2).load_state_dict(PretrainingSampler(TOTAL, 0, 4, 0, 2).state_dict())
    with pytest.raises(ConfigError, match="fingerprint"):
        make("random", 4, 0, 2).load_state_dict({**state, "fingerprint": state["fingerprint"] ^ 1})
    with pytest.raises(ConfigError, match="epoch"):
        make("random", 4, 0, 2).load_state_dict({**state, "epoch": 1})
    with pytest.raises(ConfigError, match="`order`"):
        make("random", 4, 0, 2).load_state_dict({k: v for k, v in state.items() if k != "order"})
    with pytest.raises(ConfigError, match="micro_batch_size"):
        make("random", 4, 0, 2).load_state_dict({**state, "micro_batch_size": 0})


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad,field",
    [
        (dict(total_samples=0), "total_samples"),
        (dict(micro_batch_size=0), "micro_batch_size"),
        (dict(data_parallel_rank=2), "data_parallel_rank"),
        (dict(consumed_samples=-1), "consumed_samples"),
        (dict(seed=None), "seed"),
        (dict(seed=-1), "seed"),
        (dict(order="shuffled"), "order"),
        (dict(lengths=LENGTHS), "lengths given with order='random'"),
        (dict(group_size=4), "group_size given"),
        (dict(order="length_grouped"), "needs lengths"),
        (dict(order="length_grouped", lengths=LENGTHS[:5], group_size=4), "lengths has 5 entries"),
        (dict(order="length_grouped", lengths=LENGTHS, group_size=0), "group_size"),
        (dict(order="length_grouped", lengths=-LENGTHS, group_size=2), "negative length"),
        (dict(order="length_grouped", lengths=LENGTHS, group_size=2, mega_batch_mult=0), "mega_batch_mult"),
    ],
)
def test_bad_arguments_name_the_field(bad, field):
    args = dict(total_samples=TOTAL, consumed_samples=0, micro_batch_size=4, data_parallel_rank=0, data_parallel_size=2)
    with pytest.raises(ConfigError, match=field):
        StreamSampler(**{**args, **bad})
    with pytest.raises(ConfigError, match="start"):
        make("random", 1, 0, 1).global_stream(-1, 3)
    with pytest.raises(ConfigError, match="stop"):
        make("random", 1, 0, 1).global_stream(5, 3)


def test_consumed_stream_comes_in_bounded_chunks(monkeypatch):
    import tokenport.sampling.stream as stream

    monkeypatch.setattr(stream, "_STREAM_CHUNK", 7)
    sampler = make("random", 3, 0, 1, consumed=33, total=10)
    chunks = list(sampler.consumed_stream())
    assert [len(chunk) for chunk in chunks] == [7, 7, 7, 7, 5]
    assert np.concatenate(chunks).tolist() == sampler.global_stream(0, 33).tolist()


def test_stream_sampler_does_not_import_torch():
    code = textwrap.dedent(
        """
        import sys
        import numpy as np
        from tokenport.sampling import StreamSampler
        grouping = {"lengths": np.arange(100), "group_size": 4}
        for order, extra in (("random", {}), ("sequential", {}), ("length_grouped", grouping), ("feistel", {})):
            s = StreamSampler(100, 0, 4, 1, 2, seed=7, order=order, **extra)
            assert len(list(s)) == 13
            s.load_state_dict(s.state_dict())
        assert "torch" not in sys.modules, "torch was imported"
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)
