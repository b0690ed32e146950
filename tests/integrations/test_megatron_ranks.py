"""The Megatron-LM provider under a real tensor-parallel group: which ranks keep the datasets by default."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents

pytest.importorskip("torch")
pytest.importorskip("megatron.core")

EOD = 2

RANK_SCRIPT = """
import json, sys, types, warnings
warnings.simplefilter("ignore")
import argparse, torch
from megatron.core import parallel_state
from tokenport.integrations.megatron import datasets_provider

rank, group, store, cache = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
torch.set_num_threads(1)
torch.distributed.init_process_group("gloo", init_method="file://" + group, rank=rank, world_size=2)
parallel_state.initialize_model_parallel(tensor_model_parallel_size=2)
args = argparse.Namespace(data_path=["0.5", store, "0.5", store + "-twin"], split="90,8,2", seq_length=32,
                          seed=9, data_cache_path=cache)
datasets = datasets_provider(args, tokenizer=types.SimpleNamespace(eod=2))((60, 6, 2))
print(json.dumps([None if d is None else len(d) for d in datasets]))
parallel_state.destroy_model_parallel()
torch.distributed.destroy_process_group()
"""


def test_tensor_parallel_ranks_past_the_first_get_none_by_default(tmp_path):
    """Two real processes, tensor-parallel size 2: both build (meeting at the index cache's barriers), rank 0 keeps."""
    store = str(tmp_path / "store")
    documents = random_documents(np.random.default_rng(1), 200, tokens=(3, 500), length=(2, 60), eod=EOD)
    build_store(store, documents, dtype=np.uint16)
    for suffix in (".bin", ".idx"):
        shutil.copy(store + suffix, store + "-twin" + suffix)
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(tp.__file__)))
    command = [str(tmp_path / "group"), store, str(tmp_path / "cache")]
    ranks = [
        subprocess.Popen([sys.executable, str(script), str(r), *command], stdout=subprocess.PIPE, text=True, env=env)
        for r in (0, 1)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in ranks]
    assert [p.returncode for p in ranks] == [0, 0], outputs
    results = [json.loads(out.strip().splitlines()[-1]) for out in outputs]
    assert results[0] == [60, 6, 2] and results[1] == [None, None, None]
