"""The shared argument checks, and that every room accepts or refuses the same values the same way."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents
from tokenport._checks import check_choice, check_int, check_positive, check_seed
from tokenport.builder.plan import CachePlan
from tokenport.corpus.run.config import PrepareConfig
from tokenport.corpus.steps.minhash import MinHasher
from tokenport.dock import Balanced, Column, Dock, RandomRows, RankSlices
from tokenport.errors import ConfigError
from tokenport.packing import karmarkar_karp_assignment
from tokenport.samples.gpt import GPTSampleConfig, resolve_eod
from tokenport.samples.packed import PackedDataset
from tokenport.sampling.pretraining import RandomSampler
from tokenport.storage.remote import RemoteOptions


def test_check_int_accepts_python_and_numpy_integers():
    assert check_int("n", 3) == 3
    for value in (np.int64(4), np.uint8(4), np.int32(4)):
        checked = check_int("n", value)
        assert checked == 4 and type(checked) is int
    assert check_int("n", 0, minimum=0) == 0
    assert check_int("n", 7, minimum=0, maximum=7) == 7


@pytest.mark.parametrize("value", [True, False, np.bool_(True), 1.0, 1.5, "3", None, np.float64(2)])
def test_check_int_refuses_non_integers(value):
    with pytest.raises(ConfigError, match=r"^n=.* is invalid: pass an integer of at least 0"):
        check_int("n", value, minimum=0)


def test_check_int_bounds_and_message():
    with pytest.raises(ConfigError, match=r"^k=0 is invalid: pass an integer of at least 1$"):
        check_int("k", 0)
    with pytest.raises(ConfigError, match=r"^rank=4 is invalid: pass an integer in \[0, 3\]$"):
        check_int("rank", 4, 0, 3)
    with pytest.raises(ConfigError, match=r"^k=-1 is invalid: pass the number of groups, an integer of at least 1$"):
        check_int("k", -1, what="the number of groups")


def test_check_positive():
    assert check_positive("rate", 0.5) == 0.5
    assert check_positive("rate", np.float32(2)) == 2.0
    assert check_positive("rate", np.int64(3)) == 3.0
    for value in (0, -1, 0.0, math.inf, math.nan, True, "1", None):
        with pytest.raises(ConfigError, match=r"^rate=.* is invalid: pass a finite number above 0$"):
            check_positive("rate", value)


def test_check_seed():
    assert check_seed("seed", 0) == 0
    assert check_seed("seed", np.uint32(2**32 - 1)) == 2**32 - 1
    with pytest.raises(ConfigError, match=r"^seed=None is invalid: .*None is not a seed"):
        check_seed("seed", None)
    for value in (-1, 2**32, True, 1.0):
        with pytest.raises(ConfigError, match=r"^seed=.* is invalid: pass an integer in \[0, 4294967295\]$"):
            check_seed("seed", value)


def test_check_choice_lists_the_choices():
    assert check_choice("mode", "a", ("a", "b")) == "a"
    with pytest.raises(ConfigError, match=r"^mode='c' is invalid: pass one of 'a', 'b'$"):
        check_choice("mode", "c", ("a", "b"))
    with pytest.raises(ConfigError, match="pass one of 1, 2"):
        check_choice("mode", True, (1, 2))


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tp.IndexedDataset:
    """A small uint16 store of 40 documents ending in EOD 0."""
    rng = np.random.default_rng(3)
    prefix = str(tmp_path_factory.mktemp("checks") / "store")
    documents = random_documents(rng, 40, tokens=(1, 1000), length=(2, 30), append=0)
    return tp.IndexedDataset(build_store(prefix, documents, dtype=np.uint16))


CONSTRUCTORS: dict[str, Callable[[tp.IndexedDataset, object], object]] = {
    "RandomSampler total_samples": lambda store, v: RandomSampler(v, 0, 2, 0, 1),
    "RandomSampler data_parallel_size": lambda store, v: RandomSampler(64, 0, 2, 0, v),
    "PackedDataset capacity": lambda store, v: PackedDataset(store, v, split_long=True),
    "GPTSampleConfig seq_length": lambda store, v: GPTSampleConfig(seq_length=v),
    "GPTSampleConfig cu_seqlens_length": lambda store, v: GPTSampleConfig(seq_length=8, cu_seqlens_length=v),
    "CachePlan seq_length": lambda store, v: CachePlan(("s",), "cache", seq_length=v, seed=1, samples=(1, 0, 0)),
    "CachePlan seed": lambda store, v: CachePlan(("s",), "cache", seq_length=8, seed=v, samples=(1, 0, 0)),
    "CachePlan samples": lambda store, v: CachePlan(("s",), "cache", seq_length=8, seed=1, samples=(1, v, 0)),
    "Dock n_samples_per_prompt": lambda store, v: Dock([Column("x", np.int64)], ["train"], n_samples_per_prompt=v),
    "PrepareConfig workers": lambda store, v: PrepareConfig(["in.jsonl"], "out", workers=v),
    "build_gpt_dataset num_samples": lambda store, v: tp.build_gpt_dataset(
        store, v, GPTSampleConfig(seq_length=8, eod_id=0), 0
    ),
    "RankSlices size": lambda store, v: RankSlices(0, v),
    "Balanced ranks": lambda store, v: Balanced(v, "x"),
    "karmarkar_karp_assignment k": lambda store, v: karmarkar_karp_assignment([3.0, 2.0, 1.0, 1.0], v),
    "RemoteOptions max_concurrency": lambda store, v: RemoteOptions(max_concurrency=v),
    "MinHasher bands": lambda store, v: MinHasher(bands=v),
}


@pytest.mark.parametrize("where", sorted(CONSTRUCTORS))
def test_every_room_refuses_the_same_bad_integers(store, where):
    for value in (True, 1.5, -1, "3"):
        with pytest.raises(ConfigError, match=r"=.* is invalid: pass "):
            CONSTRUCTORS[where](store, value)


def test_data_parallel_names_and_seeds_in_the_dock():
    sampler = RankSlices(data_parallel_rank=np.int64(1), data_parallel_size=2)
    assert (sampler.data_parallel_rank, sampler.data_parallel_size) == (1, 2)
    assert Balanced(data_parallel_size=np.int32(2), length_column="x").data_parallel_size == 2
    with pytest.raises(ConfigError, match=r"^data_parallel_rank=2 is invalid: pass an integer in \[0, 1\]$"):
        RankSlices(2, 2)
    for seed in (None, -1, True, 1.5):
        with pytest.raises(ConfigError, match=r"^seed=.* is invalid"):
            RandomRows(seed)
        with pytest.raises(ConfigError, match=r"^seed=.* is invalid"):
            MinHasher(seed=seed)


def test_a_token_store_is_named_store(store):
    packed = PackedDataset(store=store, capacity=np.int64(32), split_long=True)
    assert packed.store is store and packed.capacity == 32
    assert resolve_eod(GPTSampleConfig(seq_length=8, eod_id=0), store=store).eod_id == 0


@pytest.mark.parametrize("where", sorted(CONSTRUCTORS))
def test_every_room_accepts_numpy_integers(store, where):
    assert CONSTRUCTORS[where](store, np.int64(4)) is not None


def test_configs_hold_numpy_integers_as_python_ints():
    plan = CachePlan(("s",), "cache", seq_length=np.int32(8), seed=np.uint32(1), samples=(np.int64(4), 0, 0))
    assert (plan.seq_length, plan.seed, plan.samples) == (8, 1, (4, 0, 0))
    assert all(type(v) is int for v in (plan.seq_length, plan.seed, *plan.samples))
    assert type(GPTSampleConfig(seq_length=8, cu_seqlens_length=np.int16(5)).cu_seqlens_length) is int
    for value in (np.bool_(True), 10):
        with pytest.raises(ConfigError, match=r"^cu_seqlens_length=.* is invalid: pass .*\[2, 9\]$"):
            GPTSampleConfig(seq_length=8, cu_seqlens_length=value)
    with pytest.raises(ConfigError, match=r"^<plan>: samples.valid=True is invalid: pass a sample count"):
        CachePlan(("s",), "cache", seq_length=8, seed=1, samples=(1, True, 0))


@pytest.mark.parametrize("value", [2**63, 10**23, -(2**70)])
def test_an_integer_no_int64_holds_is_refused(value):
    """A value past int64 used to pass and fail later inside numpy (a TypeError from pack-report)."""
    with pytest.raises(ConfigError, match=r"batch_size=.*is invalid"):
        check_int("batch_size", value)
    assert check_int("batch_size", 2**63 - 1) == 2**63 - 1
    with pytest.raises(ConfigError, match=r"PrepareConfig\.shard_tokens=.*2\*\*63 - 1"):
        PrepareConfig(["x.jsonl"], "out", shard_tokens=2**63)


def test_a_worker_count_no_machine_runs_is_refused_before_any_process_starts():
    """--workers 10**6 used to start processes until the machine gave out (a hang, not an error)."""
    from tokenport.corpus.run.config import MAX_WORKERS

    assert PrepareConfig(["x.jsonl"], "out", workers=MAX_WORKERS).workers == MAX_WORKERS
    with pytest.raises(
        ConfigError, match=r"PrepareConfig\.workers=1025 is invalid: pass --workers, an integer in \[1, 1024\]"
    ):
        PrepareConfig(["x.jsonl"], "out", workers=MAX_WORKERS + 1)
