"""Hostile constructor arguments of samples, blends and samplers: a ConfigError naming the field, never a
bare TypeError/ValueError/OverflowError, a MemoryError or a process killed for memory, and never a
string, number or array silently taken as a flag or a weight."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents
from tokenport.blend.adaptive import AdaptiveBlend
from tokenport.blend.dataset import BlendedDataset
from tokenport.blend.schedule import MixtureSchedule
from tokenport.errors import ConfigError
from tokenport.samples.gpt import GPTDataset, GPTSampleConfig
from tokenport.samples.packed import PackedDataset
from tokenport.sampling.collate import PaddingCollator, PaddingFreeCollator
from tokenport.sampling.length_grouping import DistributedLengthGroupedSampler, get_length_grouped_indices
from tokenport.sampling.pretraining import PretrainingSampler, RandomSampler
from tokenport.sampling.stream import StreamSampler

EOD = 2
NOT_FLAGS = ["no", "", 0, 1, None, np.array([1, 2]), 1.0]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    prefix = str(tmp_path_factory.mktemp("hostile") / "store")
    documents = random_documents(np.random.default_rng(0), 30, tokens=(3, 100), length=(1, 40), eod=EOD)
    return tp.IndexedDataset(build_store(prefix, documents, dtype=np.uint16))


@pytest.fixture(scope="module")
def gpt(store):
    return GPTDataset(store, np.arange(30), 20, GPTSampleConfig(8, eod_id=EOD), 1)


@pytest.mark.parametrize("value", NOT_FLAGS, ids=repr)
def test_flags_take_only_bools(store, value):
    """drop_last="no" was True (any truthy value), an array raised a bare ValueError."""
    base = dict(total_samples=100, consumed_samples=0, micro_batch_size=4, data_parallel_rank=0, data_parallel_size=2)
    calls = [
        lambda: PretrainingSampler(**base, drop_last=value),
        lambda: PretrainingSampler(**base, auto_advance=value),
        lambda: RandomSampler(**base, data_sharding=value),
        lambda: RandomSampler(**base, megatron_compat=value),
        lambda: GPTDataset(store, np.arange(30), 20, GPTSampleConfig(8, eod_id=EOD), 1, drop_last_partial=value),
        lambda: PackedDataset(store, 32, split_long=value),
        lambda: PackedDataset(store, 32, shuffle=value),
        lambda: DistributedLengthGroupedSampler([1, 2, 3], 1, 1, 0, drop_last=value, rng="numpy"),
    ]
    for call in calls:
        with pytest.raises(ConfigError, match="pass True or False"):
            call()
    assert RandomSampler(**base, data_sharding=np.True_).data_sharding is True


NOT_WEIGHTS = [["1", "2"], [True, False], np.array([True, True]), [1, "x"], [object(), 1]]


def _weights_id(weights: object) -> str:
    """A parameter id without memory addresses, so every test process collects the same ids."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(weights))


@pytest.mark.parametrize("weights", NOT_WEIGHTS, ids=_weights_id)
def test_blend_weights_must_be_numbers(gpt, weights):
    """["1", "2"] blended 1:2 (strings parsed), [True, False] took every sample of the first dataset."""
    with pytest.raises(ConfigError, match="not numbers"):
        BlendedDataset([gpt, gpt], weights, 30)


@pytest.mark.parametrize(
    ("datasets", "weights", "size"),
    [
        (None, [1.0], 30),
        ("ab", [1.0, 1.0], 30),
        ("gpt", 1.5, 30),
        ("gpt", [1.0, 2.0], "30"),
        ("gpt", [1.0, 2.0], 1.5),
        ("gpt", [1.0, 2.0], True),
        ("gpt", [1.0, 2.0], 2**63),
        ("gpt", [1.0, 2.0], 10**30),
    ],
    ids=repr,
)
def test_blend_arguments_of_the_wrong_kind_are_config_errors(gpt, datasets, weights, size):
    """A bare TypeError (len of a float, '30' > int) or a ValueError from numpy escaped; 2**63 tried to allocate."""
    with pytest.raises(ConfigError):
        BlendedDataset([gpt, gpt] if datasets == "gpt" else datasets, weights, size)


@pytest.mark.parametrize("algorithm", [np.array([1, 2]), ["tijdeman"], None])
def test_blend_algorithm_of_the_wrong_kind(gpt, algorithm):
    with pytest.raises(ConfigError, match="algorithm"):
        BlendedDataset([gpt, gpt], [1.0, 2.0], 30, algorithm=algorithm)


@pytest.mark.parametrize("num_samples", [2**63, 2**62, 10**15])
def test_gpt_num_samples_past_memory_is_refused_before_allocating(store, num_samples):
    """2**63 raised numpy's ValueError; 2**31 and up got the process killed for memory."""
    with pytest.raises(ConfigError, match="num_samples=.* is (too large|invalid)"):
        GPTDataset(store, np.arange(30), num_samples, GPTSampleConfig(8, eod_id=EOD), 1)


@pytest.mark.parametrize("config", [None, 8, {"seq_length": 8}, "GPTSampleConfig(8)"], ids=repr)
def test_gpt_config_and_store_of_the_wrong_kind(store, config):
    """A bare AttributeError ('NoneType' has no attribute 'seq_length') escaped."""
    with pytest.raises(ConfigError, match="config="):
        GPTDataset(store, np.arange(30), 20, config, 1)
    with pytest.raises(ConfigError, match="dataset="):
        GPTDataset(config, np.arange(30), 20, GPTSampleConfig(8, eod_id=EOD), 1)
    with pytest.raises(ConfigError, match="store="):
        PackedDataset(config, 32)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("label_pad", None),
        ("label_pad", 1.5),
        ("label_pad", "-100"),
        ("label_pad", float("nan")),
        ("label_pad", 2**63),
        ("pad_id", 2**63),
        ("cu_seqlens_length", 2**31),
        ("cu_seqlens_length", 2**63),
    ],
)
def test_packed_pads_and_widths(store, name, value):
    """label_pad=1.5 became 1 and "-100" was parsed; None/NaN/2**63 raised bare errors; a huge
    cu_seqlens_length allocated (3, 2**31) arrays."""
    with pytest.raises(ConfigError, match=name):
        PackedDataset(store, 32, split_long=True, **{name: value})
    assert PackedDataset(store, 32, split_long=True, cu_seqlens_length=33).cu_seqlens_length == 33


def test_sampler_total_samples_past_int64_is_refused():
    """RandomSampler(total_samples=2**63) raised numpy's 'array is too big' ValueError when iterated."""
    for cls in (PretrainingSampler, RandomSampler, StreamSampler):
        with pytest.raises(ConfigError, match="total_samples"):
            cls(total_samples=2**63, consumed_samples=0, micro_batch_size=1, data_parallel_rank=0, data_parallel_size=1)


@pytest.mark.parametrize("num_replicas", [3, 7, 100, 2**31, 2**63 - 1])
def test_distributed_length_grouping_with_more_replicas_than_lengths(num_replicas):
    """The padded order was materialized: num_replicas=2**31 allocated 16 GiB, 2**63 a MemoryError.
    Each rank still gets what transformers' padding (repeating the head) gives it."""
    lengths = [5, 1, 9, 3, 7]
    for rank in (0, 1, 2, num_replicas - 1):
        for drop_last in (False, True):
            sampler = DistributedLengthGroupedSampler(
                lengths, 2, num_replicas, rank, seed=3, drop_last=drop_last, rng="numpy"
            )
            order = list(get_length_grouped_indices(lengths, 2, seed=(3, 0)))
            if num_replicas <= 100:
                expected = np.resize(order, sampler.total_size)[rank::num_replicas].tolist()
            else:
                expected = [] if drop_last else [order[rank % len(order)]]
            assert list(sampler) == expected
            assert len(sampler) == len(expected)


@pytest.mark.parametrize("value", [2**31, 2**62, 2**63 - 1])
def test_length_grouping_megabatches_past_the_end(value):
    """batch_size or mega_batch_mult past 2**62 overflowed (OverflowError) or allocated huge buffers;
    a megabatch past the end is the whole order, exactly."""
    lengths = [5, 1, 9, 3, 7, 2]
    whole = get_length_grouped_indices(lengths, 6, mega_batch_mult=1, seed=1)
    assert np.array_equal(get_length_grouped_indices(lengths, value, seed=1), whole)
    assert np.array_equal(get_length_grouped_indices(lengths, 2, mega_batch_mult=value, seed=1), whole)


@pytest.mark.parametrize("value", [2**63, 2**70])
def test_length_grouping_sizes_no_int64_holds_are_refused(value):
    with pytest.raises(ConfigError, match="batch_size=|mega_batch_mult="):
        get_length_grouped_indices([5, 1, 9], value, seed=1)
    with pytest.raises(ConfigError, match="mega_batch_mult="):
        get_length_grouped_indices([5, 1, 9], 2, mega_batch_mult=value, seed=1)


@pytest.mark.parametrize("sample", [1.5, "3", None, True, np.float64(2)], ids=repr)
def test_schedule_shares_at_takes_sample_numbers(sample):
    """shares_at(1.5) and shares_at(None) raised a bare TypeError; shares_at(True) was sample 1."""
    schedule = MixtureSchedule.from_data([{"at": 0, "weights": [0.7, 0.3]}])
    with pytest.raises(ConfigError, match="sample="):
        schedule.shares_at(sample)


@pytest.mark.parametrize("field", ["weights", "ramp_to"])
def test_schedule_weights_as_a_zero_d_array(field):
    """np.array(3) as a phase's weights raised a bare TypeError (len() of unsized object)."""
    data = [{"at": 0, "weights": [0.5, 0.5], "ramp_to": [0.2, 0.8], "until": 10}]
    data[0][field] = np.array(3)
    with pytest.raises(ConfigError, match=field):
        MixtureSchedule.from_data(data)


@pytest.mark.parametrize("weights", NOT_WEIGHTS, ids=_weights_id)
def test_adaptive_blend_weights_must_be_numbers(gpt, weights):
    """AdaptiveBlend(weights=["1", "2"]) parsed the strings; [True, False] took everything from the first."""
    with pytest.raises(ConfigError, match="weights"):
        AdaptiveBlend([gpt, gpt], weights, num_samples=30)
    blend = AdaptiveBlend([gpt, gpt], [1.0, 2.0], num_samples=30)
    with pytest.raises(ConfigError, match="weights"):
        blend.set_weights(weights, 5)
    assert blend.updates == ()


@pytest.mark.parametrize("collator", [PaddingCollator, PaddingFreeCollator])
def test_collators_refuse_ids_and_pads_that_do_not_fit(collator):
    """input_ids [2**63] wrapped to -2**63; label_pad=None/NaN/"" raised bare errors; an array as
    return_tensors raised numpy's ValueError."""
    make = (lambda **kw: collator(0, **kw)) if collator is PaddingCollator else collator
    with pytest.raises(ConfigError, match="past 2\\*\\*63"):
        make()([{"input_ids": [2**63]}])
    for value in (None, float("nan"), "", 1.5, 2**63):
        with pytest.raises(ConfigError, match="label_pad"):
            make(label_pad=value)
    with pytest.raises(ConfigError, match="return_tensors"):
        make(return_tensors=np.array([1, 2]))
    assert make()([{"input_ids": np.array([2**63 - 1], np.uint64)}])["input_ids"].tolist() == [[2**63 - 1]]
