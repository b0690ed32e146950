"""Epochs per dataset of a blend: counts and boundaries from the consumed global stream."""

from __future__ import annotations

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents
from tokenport.integrations import StatefulLoader
from tokenport.sampling import PretrainingSampler, RandomSampler, dataset_epochs


class _Sized:
    """A dataset of ``size`` samples whose epoch is ``per_epoch`` of them (or its length)."""

    def __init__(self, size: int, per_epoch: int | None = None) -> None:
        self.size = size
        if per_epoch is not None:
            self.samples_per_epoch = per_epoch

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, idx: int) -> dict:
        return {"id": np.int64(idx)}


class _Blend:
    def __init__(self, datasets, dataset_index) -> None:
        self.datasets = datasets
        self.dataset_index = dataset_index


def _brute_force(per_epoch: list[int], owners: np.ndarray) -> list[tuple[int, tuple[int, ...]]]:
    counts = [0] * len(per_epoch)
    boundaries: list[list[int]] = [[] for _ in per_epoch]
    for position, owner in enumerate(owners.tolist()):
        counts[owner] += 1
        if counts[owner] % per_epoch[owner] == 0:
            boundaries[owner].append(position + 1)
    return [(count, tuple(b)) for count, b in zip(counts, boundaries)]


@pytest.mark.parametrize("seed", range(6))
def test_counts_and_boundaries_equal_a_sample_by_sample_count(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 7))
    per_epoch = rng.integers(1, 40, k).tolist()
    dataset_index = rng.integers(0, k, 3000).astype(np.int16)
    blend = _Blend([_Sized(1000, p) for p in per_epoch], dataset_index)
    stream = rng.permutation(3000)[: int(rng.integers(0, 3000))]
    cuts = np.sort(rng.integers(0, len(stream) + 1, 5))
    report = dataset_epochs(blend, np.split(stream, cuts))
    expected = _brute_force(per_epoch, dataset_index[stream])
    assert [(r.samples, r.boundaries) for r in report] == expected
    for r, p in zip(report, per_epoch):
        assert r.samples_per_epoch == p
        assert r.epochs == pytest.approx(r.samples / p)
        assert r.completed_epochs == r.samples // p


def test_a_plain_dataset_is_one_entry_and_its_length_is_its_epoch():
    (report,) = dataset_epochs(_Sized(10), [np.arange(10), np.arange(5)])
    assert (report.dataset, report.samples, report.boundaries) == (0, 15, (10,))
    with pytest.raises(tp.ConfigError, match="dataset 0 has samples_per_epoch=0"):
        dataset_epochs(_Sized(10, 0), [np.arange(3)])


@pytest.mark.parametrize("data_sharding", [True, False])
@pytest.mark.parametrize("megatron_compat", [False, True])
def test_global_batches_are_the_ranks_micro_batches_side_by_side(data_sharding, megatron_compat):
    if megatron_compat:
        pytest.importorskip("torch")
    total, mbs, dp = 203, 4, 3
    whole = RandomSampler(total, 0, mbs, 0, dp, data_sharding=data_sharding, megatron_compat=megatron_compat)
    batches = whole.active_samples // whole.global_batch_size
    for epoch in (0, 2):
        ranks = [
            RandomSampler(
                total, 0, mbs, r, dp, data_sharding=data_sharding, megatron_compat=megatron_compat
            ).epoch_batches(epoch)[:batches]
            for r in range(dp)
        ]
        assert np.array_equal(whole.global_batches(epoch), np.concatenate(ranks, axis=1))


@pytest.mark.parametrize("kind", ["sequential", "random"])
def test_consumed_stream_is_what_the_ranks_were_given(kind):
    total, mbs, dp, steps = 101, 2, 3, 40  # 101 // 6 = 16 global batches an epoch: 40 steps cross two epochs
    given = []
    if kind == "sequential":
        steps = 16
        samplers = [PretrainingSampler(total, 0, mbs, r, dp) for r in range(dp)]
        per_rank = [list(s) for s in samplers]
    else:
        samplers = [RandomSampler(total, 0, mbs, r, dp, seed=2) for r in range(dp)]
        per_rank = [[b for _ in range(3) for b in s] for s in samplers]
    for step in range(steps):
        for r in range(dp):
            given.extend(per_rank[r][step])
    reader = samplers[0]
    reader.consumed_samples = steps * mbs * dp
    assert np.concatenate(list(reader.consumed_stream())).tolist() == given


def test_loader_reports_epochs_of_a_gpt_blend_and_resumes_the_report(tmp_path):
    rng = np.random.default_rng(0)
    children = []
    for name, documents in (("small", 12), ("large", 60)):
        drawn = random_documents(rng, documents, tokens=(3, 1000), length=(5, 60), eod=2)
        store = tp.IndexedDataset(build_store(tmp_path / name, drawn, dtype=np.uint16))
        children.append(tp.GPTDataset(store, np.arange(documents), 300, tp.GPTSampleConfig(16, 2), 1))
        tokens = int(store.sequence_lengths.sum())
        assert children[-1].samples_per_epoch == (tokens - 1) // 16
    blend = tp.BlendedDataset(children, [0.5, 0.5], 400)

    def loader(consumed=0):
        return StatefulLoader(blend, PretrainingSampler(len(blend), consumed, 4, 0, 2))

    first = loader()
    for step, _ in enumerate(first, 1):
        if step == 60:
            break
    report = first.dataset_epochs()
    owners = blend.dataset_index[: 60 * 8]
    assert [r.samples for r in report] == np.bincount(owners, minlength=2).tolist()
    small = report[0]
    assert small.completed_epochs >= 2 > report[1].completed_epochs  # the small store cycles first
    assert small.boundaries[0] == int(np.flatnonzero(owners == 0)[small.samples_per_epoch - 1]) + 1
    resumed = loader()
    resumed.load_state_dict(first.state_dict())
    assert resumed.dataset_epochs() == report
