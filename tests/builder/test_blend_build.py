"""build_datasets and BlendedDataset: Megatron's whole train/valid/test streams with algorithm="megatron",
exactly sized children by default, the index cache, and clear errors."""

from __future__ import annotations

import logging
import types
import warnings

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents
from tokenport.blend import BlendedDataset, max_prefix_deviation
from tokenport.builder.datasets import build_datasets
from tokenport.builder.specs import Blend, BlendSpec
from tokenport.samples.gpt import GPTDataset, GPTSampleConfig

pytest.importorskip("torch")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    gpt_dataset = pytest.importorskip("megatron.core.datasets.gpt_dataset")
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder

EOD = 2
SEQ = 32
CONFIG = GPTSampleConfig(seq_length=SEQ, eod_id=EOD)


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> list[str]:
    """Five stores of random documents ending in EOD, of quite different sizes."""
    directory = tmp_path_factory.mktemp("blend_stores")
    rng = np.random.default_rng(11)
    prefixes = []
    for k, count in enumerate((120, 400, 60, 250, 35)):
        documents = random_documents(rng, count, tokens=(3, 30_000), length=(2, 120), eod=EOD)
        prefixes.append(build_store(directory / f"store{k}", documents, dtype=np.uint16))
    return prefixes


def _megatron(blend=None, blend_per_split=None, split=None, sizes=(0, 0, 0), seed=1234, surplus=0.005):
    """megatron-core's own train/valid/test datasets for the same stores and arguments."""
    tokenizer = types.SimpleNamespace(eod=EOD, vocab_size=None, unique_identifiers={"test": "blend"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("megatron").setLevel(logging.ERROR)
        config = gpt_dataset.GPTDatasetConfig(
            random_seed=seed,
            sequence_length=SEQ,
            blend=blend,
            blend_per_split=blend_per_split,
            split=split,
            path_to_cache=None,
            tokenizer=tokenizer,
            reset_position_ids=False,
            reset_attention_mask=False,
            eod_mask_loss=False,
            mid_level_dataset_surplus=surplus,
        )
        return BlendedMegatronDatasetBuilder(gpt_dataset.GPTDataset, list(sizes), lambda: True, config).build()


def _assert_same_stream(ours, theirs, checked=200) -> None:
    """Same length, same blending indices, and the same tokens for a spread of samples."""
    if theirs is None:
        assert ours is None
        return
    assert ours is not None and len(ours) == len(theirs)
    if hasattr(theirs, "dataset_index"):
        assert ours.dataset_index.dtype == theirs.dataset_index.dtype
        assert np.array_equal(ours.dataset_index, theirs.dataset_index)
        assert np.array_equal(np.asarray(ours.dataset_sample_index), theirs.dataset_sample_index)
        assert [len(d) for d in ours.datasets] == [len(d) for d in theirs.datasets]
    ids = np.unique(np.linspace(0, len(ours) - 1, min(checked, len(ours))).astype(int)).tolist()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in ids:
            mine, peer = ours[i], theirs[i]
            assert np.array_equal(mine["tokens"], peer["tokens"].numpy()), i
            assert int(mine.get("dataset_id", 0)) == int(peer.get("dataset_id", 0)), i


@pytest.mark.parametrize(
    "weights, sizes, split, seed",
    [
        ([0.3, 0.7], (400, 40, 10), "90,8,2", 1),
        ([1, 5, 2, 9, 3], (1500, 100, 20), "85,10,5", 7),  # megatron loops forever on an empty split
        ([0.001, 0.999], (300, 20, 5), "80,15,5", 3),
        ([2.0], (200, 10, 10), "90,5,5", 4),
    ],
)
@pytest.mark.parametrize("cached", [False, True])
def test_megatron_algorithm_reproduces_megatrons_streams(stores, weights, sizes, split, seed, cached, tmp_path):
    prefixes = stores[: len(weights)]
    theirs = _megatron(blend=(prefixes, [float(w) for w in weights]), split=split, sizes=sizes, seed=seed)
    for _ in range(2 if cached else 1):  # with a cache: built into one entry per blend, then read back from it
        ours = build_datasets(
            Blend(tuple(prefixes), tuple(float(w) for w in weights)),
            sizes=sizes,
            config=CONFIG,
            seed=seed,
            split=split,
            algorithm="megatron",
            cache=tmp_path if cached else None,
        )
        for mine, peer in zip(ours, theirs):
            _assert_same_stream(mine, peer)


def test_megatron_forms_without_weights_and_single_store(stores):
    prefixes = [stores[0], stores[1], stores[3]]  # every split of each holds a sample (Megatron asserts so)
    theirs = _megatron(blend=(prefixes, None), split="80,10,10", sizes=(500, 30, 7))
    ours = build_datasets(
        prefixes, sizes=(500, 30, 7), config=CONFIG, seed=1234, split="80,10,10", algorithm="megatron"
    )
    for mine, peer in zip(ours, theirs):
        _assert_same_stream(mine, peer)
    theirs = _megatron(blend=([stores[1]], None), split="90,8,2", sizes=(300, 30, 7))
    ours = build_datasets([stores[1]], sizes=(300, 30, 7), config=CONFIG, seed=1234, split="90,8,2")
    for mine, peer in zip(ours, theirs):
        assert isinstance(mine, GPTDataset)
        _assert_same_stream(mine, peer)


def test_megatron_per_split_blends(stores):
    per_split = [(stores[:2], [0.4, 0.6]), ([stores[2]], None), (stores[3:5], [1.0, 3.0])]
    theirs = _megatron(blend_per_split=per_split, sizes=(300, 50, 40))
    spec = BlendSpec(per_split=tuple(Blend(tuple(p), None if w is None else tuple(w)) for p, w in per_split))
    ours = build_datasets(spec, sizes=(300, 50, 40), config=CONFIG, seed=1234, algorithm="megatron")
    for mine, peer in zip(ours, theirs):
        _assert_same_stream(mine, peer)


def test_default_sizes_children_exactly_and_stays_within_the_bound(stores):
    weights = (0.001, 0.2, 0.3, 0.499)
    train, valid, test = build_datasets(
        Blend(tuple(stores[:4]), weights), sizes=(2000, 100, 30), config=CONFIG, seed=5, split="90,8,2"
    )
    for blended, size in ((train, 2000), (valid, 100), (test, 30)):
        assert isinstance(blended, BlendedDataset) and len(blended) == size
        taken = blended.samples_per_dataset()
        for child, n in zip(blended.datasets, taken.tolist()):
            assert len(child) >= n  # never past a child's end, so never wrapped
        assert max_prefix_deviation(blended.dataset_index, np.array(weights)) <= 1 - 1 / (2 * 4 - 2) + 1e-9
        sample = blended[size - 1]
        assert sample["tokens"].shape == (SEQ,) and 0 <= sample["dataset_id"] < 4


def test_get_batch_equals_single_samples(stores):
    train, _, _ = build_datasets(
        Blend(tuple(stores[:3]), (1.0, 2.0, 3.0)), sizes=(600, 0, 0), config=CONFIG, seed=2, split="1"
    )
    ids = np.random.default_rng(0).integers(0, len(train), 50)
    batch = train.get_batch(ids)
    for row, i in enumerate(ids.tolist()):
        single = train[i]
        for name, value in single.items():
            assert np.array_equal(batch[name][row], value), name


def test_indices_come_from_the_cache_the_second_time(stores, tmp_path):
    blend = Blend(tuple(stores[:2]), (0.5, 0.5))
    first = build_datasets(blend, sizes=(300, 10, 0), config=CONFIG, seed=3, split="90,10,0", cache=tmp_path)
    entries = sorted(p.name for p in tmp_path.iterdir())
    again = build_datasets(blend, sizes=(300, 10, 0), config=CONFIG, seed=3, split="90,10,0", cache=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == entries
    assert not again[0].dataset_index.flags.writeable  # memory-mapped from the cache
    assert np.array_equal(first[0].dataset_index, again[0].dataset_index)


def test_megatron_surplus_zero_builds_and_a_real_shortfall_is_refused_as_megatron_core_refuses(stores, tmp_path):
    # Megatron's greedy takes 93 samples from the last dataset here, where ceil(191 * w) = 92: with no surplus
    # that dataset is sized 92, but it holds whole epochs (more than 93), so megatron-core builds, and so do we
    weights = (5.633153061270206e-05, 0.38872080797224656, 0.1343541634995919, 0.47686869699754886)
    blend = Blend(tuple(stores[:4]), weights)
    kwargs = dict(sizes=(191, 0, 0), config=CONFIG, seed=1, split="1", algorithm="megatron")
    train, _, _ = build_datasets(blend, **kwargs, surplus=0.0)
    assert len(train) == 1 + 75 + 26 + 92  # Megatron blends sum(ceil(size * w)) samples, not size
    assert train.samples_per_dataset()[3] == 93 and len(train.datasets[3]) >= 93
    theirs = _megatron(blend=(list(blend.prefixes), list(weights)), split="1,0,0", sizes=(191, 0, 0), seed=1, surplus=0)
    assert np.array_equal(train.dataset_index, theirs[0].dataset_index)
    # a store of one sample per epoch holds exactly the 92 it is sized for: megatron-core's IndexError, our ConfigError
    tiny = build_store(tmp_path / "tiny", [np.array([5] * SEQ + [EOD])], dtype=np.uint16)
    short = Blend((*stores[:3], tiny), weights)
    with pytest.raises(tp.ConfigError, match=r"tiny: the Megatron blend takes 93 samples .* holds 92.* surplus"):
        build_datasets(short, **kwargs, surplus=0.0)
    with pytest.raises(IndexError, match="oversamples"):
        _megatron(blend=(list(short.prefixes), list(weights)), split="1,0,0", sizes=(191, 0, 0), seed=1, surplus=0)
    assert len(build_datasets(short, **kwargs)[0].datasets[3]) >= 93  # the default surplus covers it


@pytest.mark.parametrize(
    "kwargs, named",
    [
        (dict(sizes=(10, 0)), "sizes"),
        (dict(sizes=(-1, 0, 0)), "sizes"),
        (dict(sizes=(10, 0, 0), surplus=float("nan")), "surplus"),
        (dict(sizes=(10, 0, 0), surplus=float("-inf")), "surplus"),
        (dict(sizes=(10, 0, 0), surplus="0.005"), "surplus"),  # a bare TypeError before
        (dict(sizes=(10, 0, 0), surplus=None), "surplus"),
        (dict(sizes=(None, 0, 0)), "size"),
    ],
)
def test_bad_arguments(stores, kwargs, named):
    with pytest.raises(tp.ConfigError, match=named):
        build_datasets(Blend(tuple(stores[:2]), (0.5, 0.5)), config=CONFIG, seed=1, split="1", **kwargs)


def test_scheduled_blend_follows_its_schedule_for_train_and_ends_its_mixture_for_eval(stores, tmp_path):
    from tokenport.blend import MixtureSchedule, build_scheduled_indices

    schedule = MixtureSchedule.from_data(
        [
            {"at": 0, "weights": [0.8, 0.2, 0.0]},
            {"at": 400, "ramp_to": [0.2, 0.3, 0.5], "until": 900},
        ]
    )
    blend = Blend(tuple(stores[:3]), None, schedule)
    train, valid, _ = build_datasets(
        blend, sizes=(1200, 100, 0), config=CONFIG, seed=9, split="90,10,0", cache=tmp_path
    )
    expected, _ = build_scheduled_indices(schedule, 1200)
    assert np.array_equal(train.dataset_index, expected)
    assert train.schedule == schedule and valid.schedule is None  # evaluation holds the final mixture
    assert train.samples_per_dataset()[2] == np.count_nonzero(expected == 2) > 0
    assert not np.any(train.dataset_index[:400] == 2)  # weight 0 in the first phase
    for child, n in zip(train.datasets, train.samples_per_dataset().tolist()):
        assert len(child) >= n
    taken = valid.samples_per_dataset() / len(valid)
    assert taken == pytest.approx([0.2, 0.3, 0.5], abs=0.02)  # the mixture training ends with
    again = build_datasets(blend, sizes=(1200, 100, 0), config=CONFIG, seed=9, split="90,10,0", cache=tmp_path)
    assert np.array_equal(again[0].dataset_index, train.dataset_index)
