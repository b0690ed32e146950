"""StatefulLoader: exact resume despite workers and prefetch; samplers built per rank, from torch.distributed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents
from tokenport.integrations import StatefulLoader
from tokenport.sampling import PretrainingSampler, RandomSampler, StreamSampler

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
    documents = random_documents(np.random.default_rng(0), 50, tokens=(3, 1000), length=(5, 80), eod=2)
    build_store(tmp_path / "s", documents, dtype=np.uint16)
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


class _Recording(_Ids):
    """An _Ids dataset that records every sample id it is asked for."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.read: list[int] = []

    def __getitem__(self, i: int) -> dict:
        self.read.append(int(i))
        return super().__getitem__(i)


def test_for_dataset_builds_the_sampler_and_each_rank_reads_only_its_samples():
    assert not torch.distributed.is_initialized()
    ranks = []
    for rank in range(2):
        dataset = _Recording(64)
        loader = StatefulLoader.for_dataset(
            dataset, micro_batch_size=2, seed=3, data_parallel_rank=rank, data_parallel_size=2
        )
        assert isinstance(loader.sampler, StreamSampler) and loader.sampler.auto_advance is False
        batches = [_ids(b) for b in loader]
        assert sorted(dataset.read) == sorted(i for batch in batches for i in batch)  # its own ids, nothing else
        ranks.append(batches)
    global_batches = StreamSampler(64, 0, 4, 0, 1, seed=3, order="feistel").global_stream(0, 64).reshape(-1, 4).tolist()
    assert [a + b for a, b in zip(*ranks)] == global_batches  # the ranks partition every global batch

    alone = StatefulLoader.for_dataset(_Ids(10), micro_batch_size=5, shuffle=False)
    assert isinstance(alone.sampler, PretrainingSampler) and [_ids(b) for b in alone] == [
        [0, 1, 2, 3, 4],
        [5, 6, 7, 8, 9],
    ]
    with pytest.raises(tp.ConfigError, match="seed=4: shuffle=False"):
        StatefulLoader.for_dataset(_Ids(10), micro_batch_size=5, shuffle=False, seed=4)
    with pytest.raises(tp.ConfigError, match="group=: torch.distributed is not initialized"):
        StatefulLoader.for_dataset(_Ids(10), micro_batch_size=5, group=object())


class _EveryOther:
    """A batch sampler of this test's own: the even ids, two at a time, with tokenport's sampler protocol."""

    def __init__(self, size: int) -> None:
        self.size, self.consumed_samples, self.auto_advance = size, 0, True

    def advance(self) -> None:
        self.consumed_samples += 2

    def __len__(self) -> int:
        return (self.size // 2 - self.consumed_samples) // 2

    def __iter__(self):
        for first in range(2 * self.consumed_samples, self.size, 4):
            yield [first, first + 2]

    def consumed_stream(self):
        yield np.arange(self.consumed_samples) * 2

    def state_dict(self) -> dict:
        return {"consumed_samples": self.consumed_samples}

    def load_state_dict(self, state: dict) -> None:
        self.consumed_samples = state["consumed_samples"]


def test_any_sampler_with_the_protocol_is_accepted_and_resumes():
    loader = StatefulLoader(_Ids(16), _EveryOther(16))
    first = next(iter(loader))
    assert _ids(first) == [0, 2] and loader.consumed_samples == 2
    resumed = StatefulLoader(_Ids(16), _EveryOther(16))
    resumed.load_state_dict(loader.state_dict())
    assert [_ids(b) for b in resumed] == [[4, 6], [8, 10], [12, 14]]
    with pytest.raises(tp.ConfigError, match="lacks advance, consumed_samples, state_dict"):
        StatefulLoader(_Ids(10), torch.utils.data.BatchSampler(range(10), 2, False))


_RANK_SCRIPT = """
import json, sys
import numpy as np
import torch
import torch.distributed as dist
import tokenport as tp
from tokenport.integrations import StatefulLoader

rank, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)

class Recording:
    def __init__(self):
        self.read = []
    def __len__(self):
        return 64
    def __getitem__(self, i):
        self.read.append(int(i))
        return {"id": np.int64(i)}

dataset = Recording()
loader = StatefulLoader.for_dataset(dataset, micro_batch_size=2, seed=3)
batches = [batch["id"].tolist() for _, batch in zip(range(5), loader)]
try:
    StatefulLoader.for_dataset(dataset, micro_batch_size=2, data_parallel_size=4)
    refused = ""
except tp.ConfigError as exc:
    refused = str(exc)
same = StatefulLoader.for_dataset(dataset, micro_batch_size=2, data_parallel_rank=rank)
with open(out, "w") as f:
    json.dump({"rank": loader.sampler.data_parallel_rank, "size": loader.sampler.data_parallel_size,
               "batches": batches, "read": dataset.read, "refused": refused,
               "same": same.sampler.data_parallel_rank}, f)
dist.barrier()
dist.destroy_process_group()
"""


def test_for_dataset_takes_rank_and_size_from_a_two_process_gloo_group(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "rank.py"
    script.write_text(_RANK_SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    outs = [tmp_path / f"rank{r}.json" for r in range(2)]
    procs = [
        subprocess.Popen([sys.executable, str(script), str(r), str(port), str(outs[r])], env=env) for r in range(2)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    results = [json.loads(out.read_text()) for out in outs]
    assert [(r["rank"], r["size"], r["same"]) for r in results] == [(0, 2, 0), (1, 2, 1)]
    for r in results:
        assert "data_parallel_size=4 but the torch.distributed process group says 2" in r["refused"]
        assert sorted(r["read"]) == sorted(i for batch in r["batches"] for i in batch)  # its own ids, nothing else
    global_batches = StreamSampler(64, 0, 4, 0, 1, seed=3, order="feistel").global_stream(0, 20).reshape(-1, 4).tolist()
    assert [a + b for a, b in zip(results[0]["batches"], results[1]["batches"])] == global_batches
    assert not set(results[0]["read"]) & set(results[1]["read"])
