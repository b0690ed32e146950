"""occurrences(store, document) through blends: equal to a brute-force forward scan over the blend's lineage."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tokenport as tp
from tests.samples.test_occurrences import check_all, random_store, scan
from tokenport.blend import AdaptiveBlend, BlendedDataset
from tokenport.blend.checkpoints import SampleIndexCheckpoints
from tokenport.blend.schedule import MixtureSchedule, Phase, build_scheduled_indices
from tokenport.errors import ConfigError


def _children(tmp_path, rng: np.random.Generator, kinds: str):
    """One small dataset per letter of ``kinds`` (g: GPT, p: packed, s: SFT), each on its own store; GPT
    children may share one store (two splits)."""
    shared = random_store(tmp_path / "shared", rng, documents=30, longest=60)
    out = []
    for k, kind in enumerate(kinds):
        if kind == "g":
            split = np.arange(0, 15) if k % 2 == 0 else np.arange(15, 30)
            out.append(tp.GPTDataset(shared, split, int(rng.integers(5, 60)), tp.GPTSampleConfig(16), seed=k))
        elif kind == "p":
            store = random_store(tmp_path / f"p{k}", rng, documents=25, longest=80)
            out.append(tp.PackedDataset(store, 64, too_long="split", seed=k))
        else:
            store = random_store(tmp_path / f"s{k}", rng, documents=25, longest=80, masks=True)
            out.append(tp.SFTDataset(store, 64, seed=k, too_long="split", num_samples=int(rng.integers(5, 40))))
    return out


def _stores(dataset) -> dict[str, int]:
    from tokenport.samples.base import store_documents

    return store_documents(dataset)


def _check_every_store(dataset) -> int:
    return sum(check_all(dataset, prefix, range(count)) for prefix, count in _stores(dataset).items())


@pytest.mark.parametrize("algorithm", ["tijdeman", "greedy", "megatron"])
@pytest.mark.parametrize("seed", range(3))
def test_blend_occurrences_equal_the_forward_scan(tmp_path, algorithm, seed):
    rng = np.random.default_rng(seed)
    children = _children(tmp_path, rng, "gpsg")
    weights = rng.random(len(children)) + 0.1
    num_samples = int(sum(len(c) for c in children) * rng.choice([0.5, 1.5]))  # 1.5: children read around
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        blend = BlendedDataset(children, weights, num_samples, algorithm=algorithm)
    assert _check_every_store(blend) > 0


def test_exhaustive_and_nested_blends(tmp_path):
    rng = np.random.default_rng(7)
    inner = BlendedDataset(_children(tmp_path / "a", rng, "gp"), None, None)  # every sample once
    other = _children(tmp_path / "b", rng, "sg")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outer = BlendedDataset([inner, *other], [0.5, 0.3, 0.2], 150)
    assert _check_every_store(inner) > 0
    assert _check_every_store(outer) > 0


def test_scheduled_blend(tmp_path):
    rng = np.random.default_rng(3)
    children = _children(tmp_path, rng, "gpg")
    schedule = MixtureSchedule((Phase(0, (0.8, 0.1, 0.1)), Phase(40, (0.8, 0.1, 0.1), (0.1, 0.1, 0.8), 90)))
    dataset_index, sample_index = build_scheduled_indices(schedule, 120)
    blend = BlendedDataset.from_indices(children, dataset_index, sample_index, schedule=schedule)
    assert _check_every_store(blend) > 0


def test_blend_over_checkpointed_sample_index(tmp_path):
    rng = np.random.default_rng(4)
    children = _children(tmp_path, rng, "gp")
    dataset_index, sample_index = tp.blend.build_blending_indices(np.array([0.6, 0.4]), 90)
    checkpoints = SampleIndexCheckpoints(dataset_index, 2, block=7)
    blend = BlendedDataset.from_indices(children, dataset_index, checkpoints)
    plain = BlendedDataset.from_indices(children, dataset_index, sample_index)
    for prefix, count in _stores(blend).items():
        for document in range(count):
            assert blend.occurrences(prefix, document) == plain.occurrences(prefix, document)
    assert _check_every_store(blend) > 0


def test_blend_whose_sample_index_is_not_a_count(tmp_path):
    # indices from elsewhere: child samples in another order than their count; matched by value
    rng = np.random.default_rng(5)
    children = _children(tmp_path, rng, "gp")
    dataset_index, sample_index = tp.blend.build_blending_indices(np.array([0.5, 0.5]), 40)
    shuffled = sample_index.copy()
    for d in range(2):
        where = np.flatnonzero(dataset_index == d)
        shuffled[where] = rng.permutation(shuffled[where]) % len(children[d])
    blend = BlendedDataset.from_indices(children, dataset_index, shuffled)
    assert _check_every_store(blend) > 0


def _answers(dataset) -> dict[tuple[str, int], object]:
    return {(p, d): dataset.occurrences(p, d) for p, count in _stores(dataset).items() for d in range(count)}


@pytest.mark.parametrize("seed", range(3))
def test_adaptive_blend_replays_its_updates(tmp_path, seed):
    rng = np.random.default_rng(seed)
    children = _children(tmp_path, rng, "gps")
    updates = [(10, [0.1, 0.1, 0.8]), (35, [0.5, 0.5, 0.0]), (70, [0.2, 0.6, 0.2])]
    blend = AdaptiveBlend(children, [1.0, 1.0, 1.0], num_samples=100, updates=updates)
    blend.realize(20)
    realized = blend.dataset_index.copy()
    answers = _answers(blend)
    assert np.array_equal(blend.dataset_index, realized)  # asking realized nothing on the blend itself
    forward = AdaptiveBlend(children, [1.0, 1.0, 1.0], num_samples=100, updates=updates)
    assert answers == {key: scan(forward, *key) for key in answers}
    assert sum(len(found) for found in answers.values()) > 0
    blend.set_weights([0.0, 1.0, 0.0], 80)  # still allowed: the frontier stayed at 20
    changed = AdaptiveBlend(children, [1.0, 1.0, 1.0], num_samples=100, updates=blend.updates)
    answers = _answers(blend)  # the new update is replayed
    assert answers == {key: scan(changed, *key) for key in answers}


def test_hostile_arguments_through_a_blend(tmp_path):
    children = _children(tmp_path, np.random.default_rng(0), "gp")
    blend = BlendedDataset(children, [0.5, 0.5], 30)
    prefix = str(children[1].store.prefix)
    for store, document, match in [
        ("other", 0, "store='other'"),
        (prefix, len(children[1].store), "document="),
        (prefix, -3, "document=-3"),
        (prefix, np.float64(2), r"document=np.float64\(2.0\)"),
        (prefix, False, "document=False"),
    ]:
        with pytest.raises(ConfigError, match=match):
            blend.occurrences(store, document)
    assert blend.occurrences(prefix, 0) == scan(blend, prefix, 0)


def test_adaptive_blend_random_calls_against_a_fresh_replay(tmp_path):
    # a shadow model: after any sequence of set_weights / realize / occurrences calls, occurrences equals the
    # forward scan of a blend built afresh with the same updates, and never moves the frontier
    rng = np.random.default_rng(21)
    children = _children(tmp_path, rng, "gp")
    blend = AdaptiveBlend(children, [1.0, 1.0], num_samples=80)
    prefixes = list(_stores(blend).items())
    for _ in range(12):
        action = int(rng.integers(3))
        frontier = len(blend.dataset_index)
        if action == 0:
            start = max(frontier, blend.updates[-1][0] + 1 if blend.updates else 0)
            if start < 80:
                blend.set_weights(rng.random(2) + 0.05, int(rng.integers(start, 80)))
        elif action == 1:
            blend.realize(int(rng.integers(frontier, 81)))
        else:
            prefix, count = prefixes[int(rng.integers(len(prefixes)))]
            document = int(rng.integers(count))
            got = blend.occurrences(prefix, document)
            assert len(blend.dataset_index) == frontier
            model = AdaptiveBlend(children, [1.0, 1.0], num_samples=80, updates=blend.updates)
            assert got == scan(model, prefix, document)
        before = (len(blend.dataset_index), blend.updates, blend._occurrence_inverse)
        with pytest.raises(ConfigError):
            blend.occurrences(prefixes[0][0], -1)  # a refused call changes nothing
        assert (len(blend.dataset_index), blend.updates, blend._occurrence_inverse) == before
