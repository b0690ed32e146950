"""A build killed while writing its stat record (before the rename publishes it) leaves no record and,
after the next build, no temporary: that build reads the manifests, gives the same samples and records."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np

from tests._support.stores import build_store
from tokenport.builder.datasets import build_datasets
from tokenport.indexed import commit
from tokenport.samples.gpt import GPTSampleConfig

EOD = 2
CHILD = textwrap.dedent(
    """
    import sys
    from tokenport.builder.datasets import build_datasets
    from tokenport.samples.gpt import GPTSampleConfig
    cache, prefixes = sys.argv[1], sys.argv[2:]
    spec = [x for p in prefixes for x in ("1", p)]
    build_datasets(spec, sizes=(40, 0, 0), config=GPTSampleConfig(seq_length=16), seed=3, split="1,0,0", cache=cache)
    """
)


def _write(prefix, seed: int) -> str:
    lengths = np.tile([5, 9, 3, 11, 7], 8)
    tokens = np.random.default_rng(seed).integers(3, 1000, int(lengths.sum())).astype(np.uint16)
    tokens[np.cumsum(lengths) - 1] = EOD
    return build_store(prefix, tokens, lengths=lengths, dtype=np.uint16, tokenizer={"eod_id": EOD, "vocab_size": 1000})


def _build(cache, prefixes):
    spec = [x for p in prefixes for x in ("1", p)]
    train = build_datasets(
        spec, sizes=(40, 0, 0), config=GPTSampleConfig(seq_length=16), seed=3, split="1,0,0", cache=cache
    )[0]
    return train.get_batch(np.arange(40))["tokens"]


def test_a_build_killed_before_its_stat_record_is_published_leaves_nothing_behind(tmp_path):
    prefixes = [_write(tmp_path / f"s{k}", k) for k in range(3)]
    cache = tmp_path / "cache"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **{commit.FAULT_ENV: "stat_record:1"})
    code = subprocess.run([sys.executable, "-c", CHILD, str(cache), *prefixes], env=env, timeout=300).returncode
    assert code == commit.FAULT_EXIT_CODE
    leftovers = [name for name in os.listdir(cache) if name.startswith(".stat-")]
    assert leftovers and not [name for name in os.listdir(cache) if name.startswith("stat-")]
    expected = _build(tmp_path / "fresh", prefixes)
    assert np.array_equal(_build(cache, prefixes), expected)  # the entry the child published, then the record
    names = os.listdir(cache)
    assert not [name for name in names if name.startswith(".stat-")]  # the dead writer's temporary is gone
    assert len([name for name in names if name.startswith("stat-")]) == 1
