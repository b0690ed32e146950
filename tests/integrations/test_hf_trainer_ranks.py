"""TokenportTrainer on two real data-parallel ranks (torchrun, gloo): each rank reads only its part of
each global batch, and a 2-rank checkpoint resumes on one rank with the same global sample stream."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents

pytest.importorskip("torch")
pytest.importorskip("transformers")

WORKER = str(Path(__file__).with_name("hf_worker.py"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(command: list[str]) -> None:
    src = str(Path(tp.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]


def test_two_ranks_split_each_global_batch_and_resume_on_one(tmp_path):
    documents = random_documents(np.random.default_rng(0), 60, tokens=(3, 96), length=(5, 80), eod=2)
    build_store(tmp_path / "store", documents, dtype=np.uint16)
    store, run = str(tmp_path / "store"), str(tmp_path / "run")
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    _run(
        [*launch, "--master_addr", "127.0.0.1", "--master_port", str(_free_port())]
        + [WORKER, store, run, str(tmp_path / "two"), "2", "4", "-"]
    )
    ranks = [json.loads((tmp_path / f"two.{rank}.json").read_text()) for rank in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]

    # global batches of 4 in tokenport's elastic order: rank 0 reads slots 0-1, rank 1 slots 2-3
    dataset_size = len(tp.GPTDataset(tp.IndexedDataset(store), np.arange(60), 16, tp.GPTSampleConfig(32, eod_id=2), 1))
    expected = tp.RandomSampler(dataset_size, 0, 4, 0, 1, seed=7).epoch_batches(0)[:4]
    assert ranks[0]["read"] == expected[:, :2].reshape(-1).tolist()
    assert ranks[1]["read"] == expected[:, 2:].reshape(-1).tolist()

    # one rank, micro-batch 4: the same global batch, continuing from the 2-rank checkpoint at step 2
    _run([sys.executable, WORKER, store, run, str(tmp_path / "one"), "4", "4", os.path.join(run, "checkpoint-2")])
    one = json.loads((tmp_path / "one.0.json").read_text())
    assert one["world_size"] == 1
    assert one["read"] == expected[2:].reshape(-1).tolist()
    later = {step: loss for step, loss in ranks[0]["losses"].items() if int(step) > 2}
    resumed = {step: loss for step, loss in one["losses"].items() if int(step) > 2}
    assert resumed == pytest.approx(later, rel=1e-4)  # the same samples; only the reduction order differs
