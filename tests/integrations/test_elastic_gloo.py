"""Elastic resume on real ranks: a blend read by 2 gloo processes is checkpointed, resumed on 3 with another
global batch and a worker each, and the ranks' gathered batches are the one global order of a single process."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents
from tokenport.integrations import StatefulLoader
from tokenport.sampling import StreamSampler

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
mp = pytest.importorskip("torch.multiprocessing")

SEED = 5  # the loader's shuffle seed
PHASES = (  # (ranks, micro_batch_size, num_workers, steps): global batch 8, then 12 from sample 40 on
    (2, 4, 0, 5),
    (3, 4, 1, 7),
)


def _blend(prefixes: list[str]):
    """The run's dataset, built the same way by every rank: a 60/40 blend of two GPT datasets."""
    spec = ["0.6", prefixes[0], "0.4", prefixes[1]]
    return tp.build_datasets(spec, sizes=(64, 0, 0), config=tp.GPTSampleConfig(8, 256), seed=3, split="1,0,0")[0]


def _rank(rank: int, ranks: int, port: int, prefixes: list[str], phase: int, root: str) -> None:
    """One rank of a phase: join the gloo group, resume from the state (phase 1), hand over its steps, gather."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ranks)
    try:
        _, mbs, workers, steps = PHASES[phase]
        loader = StatefulLoader.for_dataset(_blend(prefixes), micro_batch_size=mbs, seed=SEED, num_workers=workers)
        if phase:
            with open(f"{root}/state.json") as file:
                loader.load_state_dict(json.load(file))
        handed: list[np.ndarray] = []
        while len(handed) < steps:  # one `for` walks one epoch
            for batch in loader:
                handed.append(batch["tokens"].numpy())
                if len(handed) == steps:
                    break
        gathered: list = [None] * ranks
        dist.all_gather_object(gathered, handed)
        if rank == 0:
            np.save(f"{root}/phase{phase}.npy", np.concatenate([np.concatenate(step) for step in zip(*gathered)]))
            with open(f"{root}/state.json", "w") as file:
                json.dump(loader.state_dict(), file)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_blend_saved_on_two_gloo_ranks_resumes_on_three_with_another_global_batch(tmp_path):
    rng = np.random.default_rng(0)
    prefixes = [
        build_store(tmp_path / f"s{k}", random_documents(rng, 30, tokens=(32, 127), length=(5, 40), append=256))
        for k in range(2)
    ]
    dataset = _blend(prefixes)  # built once here first: its index cache is shared by the ranks' builds
    for phase, (ranks, *_) in enumerate(PHASES):
        args = (ranks, _free_port(), prefixes, phase, str(tmp_path))
        mp.start_processes(_rank, args=args, nprocs=ranks, start_method="fork")
    got = np.concatenate([np.load(tmp_path / f"phase{phase}.npy") for phase in range(len(PHASES))])
    assert len(got) == 5 * 8 + 7 * 12  # past the end of the first epoch (64 samples)
    ids = StreamSampler(len(dataset), 0, 1, 0, 1, seed=SEED, order="feistel").global_stream(0, len(got))
    assert np.array_equal(got, dataset.get_batch(ids)["tokens"])  # the one global order of a single process
    final = json.loads((tmp_path / "state.json").read_text())
    assert final["sampler"]["consumed_samples"] == len(got)
