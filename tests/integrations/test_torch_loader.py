"""StatefulLoader: a checkpoint taken mid-epoch with worker processes and prefetch resumes exactly."""

from __future__ import annotations

import numpy as np
import pytest

import tokenport as tp
from tokenport.integrations import StatefulLoader
from tokenport.sampling import PretrainingSampler, RandomSampler

torch = pytest.importorskip("torch")


class _Ids:
    """A map-style dataset whose sample i is {"id": i}: what was read is what was trained on."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> dict:
        return {"id": np.int64(i)}


def _ids(batch) -> list[int]:
    return batch["id"].tolist()


def _sampler(kind: str, consumed: int = 0):
    if kind == "random":
        return RandomSampler(203, consumed, micro_batch_size=4, data_parallel_rank=1, data_parallel_size=2, seed=5)
    return PretrainingSampler(203, consumed, micro_batch_size=4, data_parallel_rank=1, data_parallel_size=2)


@pytest.mark.parametrize("kind", ["random", "sequential"])
@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_equals_the_uninterrupted_run(kind, workers):
    options = dict(num_workers=workers, prefetch_factor=4) if workers else {}
    uninterrupted = [_ids(b) for b in StatefulLoader(_Ids(203), _sampler(kind), **options)]
    assert len(uninterrupted) == 25  # 203 // 8 full global batches, this rank's half of each

    first = StatefulLoader(_Ids(203), _sampler(kind), **options)
    seen = []
    for batch in first:
        seen.append(_ids(batch))
        if len(seen) == 7:
            break  # the workers have prefetched more than 7 batches; only 7 count
    state = first.state_dict()
    assert state["sampler"]["consumed_samples"] == 7 * 8

    resumed = StatefulLoader(_Ids(203), _sampler(kind), **options)
    resumed.load_state_dict(state)
    assert seen + [_ids(b) for b in resumed] == uninterrupted


def test_epochs_continue_and_gpt_samples_batch(tmp_path):
    rng = np.random.default_rng(0)
    with tp.IndexedDatasetWriter(tmp_path / "s", dtype=np.uint16) as writer:
        for _ in range(50):
            tokens = rng.integers(3, 1000, int(rng.integers(5, 80)))
            tokens[-1] = 2
            writer.add_document(tokens)
    ds = tp.GPTDataset(tp.IndexedDataset(tmp_path / "s"), np.arange(50), 40, tp.GPTSampleConfig(16, 2), 1)
    loader = StatefulLoader(ds, RandomSampler(len(ds), 0, 2, 0, 1, seed=3), num_workers=1)
    epoch0 = [batch["tokens"].shape for batch in loader]
    assert loader.epoch == 1 and all(shape == (2, 16) for shape in epoch0)
    assert len(list(loader)) == len(epoch0)  # the second loop is epoch 1


def test_refuses_other_samplers_options_and_states():
    with pytest.raises(tp.ConfigError, match="sampler"):
        StatefulLoader(_Ids(10), torch.utils.data.SequentialSampler(range(10)))
    with pytest.raises(tp.ConfigError, match="batch_size"):
        StatefulLoader(_Ids(10), _sampler("random"), batch_size=4)
    loader = StatefulLoader(_Ids(203), _sampler("random"))
    with pytest.raises(tp.ConfigError, match="StatefulLoader.state_dict"):
        loader.load_state_dict({"consumed_samples": 8})
    other = StatefulLoader(_Ids(203), RandomSampler(203, 0, 4, 1, 2, seed=6))
    with pytest.raises(tp.ConfigError, match="seed"):
        other.load_state_dict(loader.state_dict())
