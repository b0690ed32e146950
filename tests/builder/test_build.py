"""build.py: Megatron-exact splits, and the index cache (keys, crash safety, processes, ranks)."""

from __future__ import annotations

import json
import logging
import mmap
import multiprocessing
import os
import random
import socket
import time

import numpy as np
import pytest

from tests._support.stores import build_store, random_documents
from tokenport.builder import (
    CACHE_FORMAT,
    IndexCache,
    cache_key,
    parse_split,
    split_document_ranges,
)
from tokenport.errors import ConfigError
from tokenport.indexed import IndexedDataset
from tokenport.samples import gpt

PARAMS = {"split": [0, 90], "num_samples": 40, "seq_length": 16, "seed": 1234, "add_extra_token": True}


def _mapped(array) -> bool:
    """Whether an array views a memory map (a cache hit), not memory of its own (a build)."""
    while array is not None:
        if isinstance(array, (mmap.mmap, np.memmap)):
            return True
        array = array.obj if isinstance(array, memoryview) else getattr(array, "base", None)
    return False


def make_store(prefix: str, num_documents: int = 100, seed: int = 0) -> str:
    """A small store of `num_documents` random documents, with its manifest."""
    documents = random_documents(np.random.default_rng(seed), num_documents, tokens=(0, 1000), length=(1, 50))
    return build_store(prefix, documents, dtype=np.uint16)


def gpt_build(store: IndexedDataset, params: dict, marker: str | None = None):
    """A build callable making real GPT indices over the params' split; appends a line to `marker`."""

    def build() -> dict[str, np.ndarray]:
        if marker is not None:
            with open(marker, "a", encoding="utf-8") as f:
                f.write(f"{os.getpid()} {os.environ.get('RANK', '-')}\n")
        begin, end = params["split"]
        document, sample, shuffle = gpt.build_indices(
            store.sequence_lengths[begin:end],
            params["num_samples"],
            params["seq_length"],
            params["seed"],
            add_extra_token=params["add_extra_token"],
        )
        return {"document_index": document, "sample_index": sample, "shuffle_index": shuffle}

    return build


def marker_lines(path) -> list[str]:
    return open(path, encoding="utf-8").read().splitlines() if os.path.exists(path) else []


# -- splits -----------------------------------------------------------------------------------------


def megatron_ranges(split: str, num_documents: int):
    """Megatron-core's split vector and per-split document ranges, computed as its builder does."""
    config = pytest.importorskip("megatron.core.datasets.blended_megatron_dataset_config")
    vector = config.parse_and_normalize_split(split)
    ranges = []
    for bookend in config.convert_split_vector_to_split_matrix(vector):
        if bookend is None:
            ranges.append(None)
        else:
            ranges.append(
                (int(round(bookend[0] * float(num_documents))), int(round(bookend[1] * float(num_documents))))
            )
    return vector, ranges


def random_split(rng: random.Random) -> str:
    """A split string with 1 to 3 integer or decimal weights, at least one of them positive."""
    while True:
        fields = []
        for _ in range(rng.randint(1, 3)):
            kind = rng.random()
            if kind < 0.25:
                fields.append("0")
            elif kind < 0.7:
                fields.append(str(rng.randint(1, 1000)))
            else:
                fields.append(f"{rng.uniform(0, 100):.{rng.randint(1, 6)}f}")
        if any(float(text) > 0 for text in fields):
            return rng.choice([",", ", "]).join(fields)


def test_split_parity_with_megatron_on_random_strings_and_counts() -> None:
    rng = random.Random(7)
    fixed = ["969,30,1", "98,2,0", "1", "99,1", "0,1,0", "0,0,1", "1,1,1", "3,3,3", "0.5,0.25,0.25", "949,50,1"]
    cases = 0
    for split in fixed + [random_split(rng) for _ in range(400)]:
        for num_documents in list(range(0, 13)) + [rng.randint(13, 10**7) for _ in range(6)]:
            vector, ranges = megatron_ranges(split, num_documents)
            assert list(parse_split(split)) == vector, split
            assert split_document_ranges(split, num_documents) == ranges, (split, num_documents)
            cases += 1
    assert cases > 7000


def test_split_examples() -> None:
    assert split_document_ranges("98,2,0", 1000) == [(0, 980), (980, 1000), None]
    assert split_document_ranges("1", 7) == [(0, 7), None, None]
    assert parse_split("1,1,2") == (0.25, 0.25, 0.5)


@pytest.mark.parametrize("split", ["", "a,b", "1,2,3,4", "-1,2", "0,0,0", "1e3,1", "1,,2", "1.2.3", "inf"])
def test_bad_split_raises_config_error_naming_the_field(split: str) -> None:
    with pytest.raises(ConfigError, match="split="):
        parse_split(split)


@pytest.mark.parametrize("count", [-1, 2.5, True, "10"])
def test_bad_document_count_raises_config_error(count) -> None:
    with pytest.raises(ConfigError, match="num_documents"):
        split_document_ranges("1", count)


# -- cache keys, hits and misses --------------------------------------------------------------------


def test_second_call_is_a_memory_mapped_hit_with_identical_arrays(tmp_path) -> None:
    store = IndexedDataset(make_store(str(tmp_path / "wiki")))
    cache = IndexCache(tmp_path / "cache")
    marker = str(tmp_path / "builds")
    first = cache.get_or_build(store, PARAMS, gpt_build(store, PARAMS, marker))
    second = cache.get_or_build(store, dict(reversed(list(PARAMS.items()))), gpt_build(store, PARAMS, marker))
    assert len(marker_lines(marker)) == 1
    expected = gpt_build(store, PARAMS)()
    for name, array in expected.items():
        for loaded in (first[name], second[name]):
            assert _mapped(loaded) and not loaded.flags.writeable
            assert loaded.dtype == array.dtype and np.array_equal(loaded, array)
    entry = cache.entry_path(cache_key(store, PARAMS))
    names = ["arrays.bin", "description.json"]
    assert sorted(os.listdir(entry)) == names
    description = json.load(open(os.path.join(entry, "description.json"), encoding="utf-8"))
    assert description["format"] == CACHE_FORMAT and description["params"] == PARAMS
    assert description["store"] == store.prefix and description["arrays"]["sample_index"]["dtype"] == "int32"


@pytest.mark.parametrize(
    "change",
    [
        {"split": [90, 99]},
        {"num_samples": 41},
        {"seq_length": 17},
        {"seed": 1235},
        {"add_extra_token": False},
        {"drop_last_partial": False},
        {"threshold": 0.8},
    ],
)
def test_any_param_change_is_a_miss(tmp_path, change) -> None:
    store = IndexedDataset(make_store(str(tmp_path / "wiki")))
    cache = IndexCache(tmp_path / "cache")
    marker = str(tmp_path / "builds")
    changed = {**PARAMS, **change}
    cache.get_or_build(store, PARAMS, gpt_build(store, PARAMS, marker))
    cache.get_or_build(store, changed, gpt_build(store, {**PARAMS, "seed": changed["seed"]}, marker))
    cache.get_or_build(store, changed, gpt_build(store, PARAMS, marker))
    assert cache_key(store, PARAMS) != cache_key(store, changed)
    assert len(marker_lines(marker)) == 2


def test_numpy_scalar_params_key_like_python_ones(tmp_path) -> None:
    store = IndexedDataset(make_store(str(tmp_path / "wiki")))
    as_numpy = {**PARAMS, "num_samples": np.int64(40), "add_extra_token": np.bool_(True)}
    assert cache_key(store, as_numpy) == cache_key(store, PARAMS)


def test_rewritten_store_gets_a_new_key(tmp_path) -> None:
    prefix = str(tmp_path / "wiki")
    make_store(prefix, seed=0)
    cache = IndexCache(tmp_path / "cache")
    marker = str(tmp_path / "builds")
    before = IndexedDataset(prefix)
    old_key = cache_key(before, PARAMS)
    cache.get_or_build(before, PARAMS, gpt_build(before, PARAMS, marker))
    make_store(prefix, seed=1)
    after = IndexedDataset(prefix)
    arrays = cache.get_or_build(after, PARAMS, gpt_build(after, PARAMS, marker))
    assert cache_key(after, PARAMS) != old_key and len(marker_lines(marker)) == 2
    assert np.array_equal(arrays["sample_index"], gpt_build(after, PARAMS)()["sample_index"])


def test_store_without_manifest_is_keyed_by_size_and_mtime(tmp_path) -> None:
    prefix = str(tmp_path / "wiki")
    make_store(prefix, seed=0)
    os.unlink(prefix + ".json")
    key = cache_key(IndexedDataset(prefix), PARAMS)
    assert cache_key(IndexedDataset(prefix), PARAMS) == key
    stat = os.stat(prefix + ".bin")
    os.utime(prefix + ".bin", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert cache_key(IndexedDataset(prefix), PARAMS) != key


@pytest.mark.parametrize("params", [{"seed": object()}, {"threshold": float("nan")}, [("seed", 1)]])
def test_params_that_cannot_be_keyed_raise_config_error(tmp_path, params) -> None:
    store = IndexedDataset(make_store(str(tmp_path / "wiki")))
    with pytest.raises(ConfigError, match="params"):
        IndexCache(tmp_path / "cache").get_or_build(store, params, lambda: {"a": np.zeros(1)})


@pytest.mark.parametrize("result", [None, {}, {"a": [1, 2]}, {"../escape": np.zeros(1)}, {"a": np.array([None])}])
def test_bad_build_results_raise_config_error_and_leave_no_entry(tmp_path, result) -> None:
    store = IndexedDataset(make_store(str(tmp_path / "wiki")))
    cache = IndexCache(tmp_path / "cache")
    with pytest.raises(ConfigError, match="build returned"):
        cache.get_or_build(store, PARAMS, lambda: result)
    assert not os.path.exists(cache.entry_path(cache_key(store, PARAMS)))


def test_empty_and_scalar_arrays_round_trip(tmp_path) -> None:
    store = IndexedDataset(make_store(str(tmp_path / "wiki")))
    cache = IndexCache(tmp_path / "cache")
    arrays = {"empty": np.zeros((0, 2), np.int32), "scalar": np.array(3.5)}
    cache.get_or_build(store, PARAMS, lambda: arrays)
    loaded = cache.get_or_build(store, PARAMS, lambda: pytest.fail("rebuilt"))
    assert loaded["empty"].shape == (0, 2) and loaded["empty"].dtype == np.int32
    assert float(loaded["scalar"]) == 3.5


# -- crash safety ---------------------------------------------------------------------------------


def test_a_build_that_raises_leaves_no_entry(tmp_path) -> None:
    store = IndexedDataset(make_store(str(tmp_path / "wiki")))
    cache = IndexCache(tmp_path / "cache")

    def failing() -> dict[str, np.ndarray]:
        raise RuntimeError("out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        cache.get_or_build(store, PARAMS, failing)
    key = cache_key(store, PARAMS)
    assert sorted(os.listdir(cache.directory)) == [key + ".lock"]
    marker = str(tmp_path / "builds")
    cache.get_or_build(store, PARAMS, gpt_build(store, PARAMS, marker))
    assert len(marker_lines(marker)) == 1


def test_a_partial_staging_directory_is_ignored_and_cleaned(tmp_path) -> None:
    store = IndexedDataset(make_store(str(tmp_path / "wiki")))
    cache = IndexCache(tmp_path / "cache")
    key = cache_key(store, PARAMS)
    partial = tmp_path / "cache" / f".{key}.99999999.abc.tmp"
    partial.mkdir(parents=True)
    (partial / "sample_index.npy").write_bytes(b"\x93NUMPY truncated")
    (partial / "description.json").write_text('{"arrays": ["sample_index"]}')
    marker = str(tmp_path / "builds")
    arrays = cache.get_or_build(store, PARAMS, gpt_build(store, PARAMS, marker))
    assert len(marker_lines(marker)) == 1 and not partial.exists()
    assert np.array_equal(arrays["sample_index"], gpt_build(store, PARAMS)()["sample_index"])
    assert sorted(os.listdir(cache.directory)) == [key, key + ".lock"]


# -- unwritable directory -------------------------------------------------------------------------


def test_unwritable_directory_builds_in_memory_with_a_warning(tmp_path, caplog) -> None:
    store = IndexedDataset(make_store(str(tmp_path / "wiki")))
    (tmp_path / "a_file").write_text("not a directory")
    cache = IndexCache(tmp_path / "a_file" / "cache")
    with caplog.at_level(logging.WARNING, logger="tokenport.builder"):
        arrays = cache.get_or_build(store, PARAMS, gpt_build(store, PARAMS))
    assert "building the indices in memory" in caplog.text and str(tmp_path / "a_file") in caplog.text
    assert not _mapped(arrays["sample_index"])
    assert np.array_equal(arrays["sample_index"], gpt_build(store, PARAMS)()["sample_index"])


def test_unwritable_directory_raises_when_strict(tmp_path) -> None:
    store = IndexedDataset(make_store(str(tmp_path / "wiki")))
    (tmp_path / "a_file").write_text("not a directory")
    cache = IndexCache(tmp_path / "a_file" / "cache")
    with pytest.raises(ConfigError, match="index cache directory .*a_file.*cannot write"):
        cache.get_or_build(store, PARAMS, gpt_build(store, PARAMS), strict=True)


# -- many processes on one machine ----------------------------------------------------------------


def race_worker(prefix: str, directory: str, marker: str, start, results) -> None:
    """One racing process: wait for the start, then get the indices through the cache."""
    store = IndexedDataset(prefix)

    def slow_build() -> dict[str, np.ndarray]:
        time.sleep(0.3)  # keep the builder busy while the others arrive at the lock
        return gpt_build(store, PARAMS, marker)()

    start.wait()
    arrays = IndexCache(directory).get_or_build(store, PARAMS, slow_build)
    results.put({name: np.array(array) for name, array in arrays.items()})


def test_racing_processes_build_once_and_agree(tmp_path) -> None:
    prefix = make_store(str(tmp_path / "wiki"))
    marker = str(tmp_path / "builds")
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    workers = [
        context.Process(target=race_worker, args=(prefix, str(tmp_path / "cache"), marker, start, results))
        for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    start.set()
    outcomes = [results.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    assert len(marker_lines(marker)) == 1
    expected = gpt_build(IndexedDataset(prefix), PARAMS)()
    for outcome in outcomes:
        assert outcome.keys() == expected.keys()
        for name, array in expected.items():
            assert outcome[name].dtype == array.dtype and np.array_equal(outcome[name], array)


# -- ranks of a torch.distributed group -----------------------------------------------------------


def rank_worker(rank: int, port: int, prefix: str, root: str) -> None:
    """One rank of a 2-rank gloo group: the node-local and the shared-filesystem elections."""
    import torch.distributed as dist

    os.environ["RANK"] = str(rank)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        store = IndexedDataset(prefix)
        for scenario, local_rank, shared in (("local", rank, False), ("shared", 0, True)):
            os.environ["LOCAL_RANK"] = str(local_rank)  # "shared": two nodes, each rank its node's first
            time.sleep(0.5 if rank == 0 else 0.0)  # rank 1 arrives first: only the election stops it building
            marker = os.path.join(root, f"{scenario}.builds")
            arrays = IndexCache(os.path.join(root, scenario)).get_or_build(
                store, PARAMS, gpt_build(store, PARAMS, marker), shared_filesystem=shared
            )
            np.save(os.path.join(root, f"{scenario}.rank{rank}.npy"), np.asarray(arrays["sample_index"]))
            assert _mapped(arrays["sample_index"])
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_gloo_ranks_build_on_the_elected_rank_only(tmp_path) -> None:
    torch_multiprocessing = pytest.importorskip("torch.multiprocessing")
    prefix = make_store(str(tmp_path / "wiki"))
    torch_multiprocessing.spawn(rank_worker, args=(free_port(), prefix, str(tmp_path)), nprocs=2, join=True)
    expected = gpt_build(IndexedDataset(prefix), PARAMS)()["sample_index"]
    for scenario in ("local", "shared"):
        builders = [line.split()[1] for line in marker_lines(tmp_path / f"{scenario}.builds")]
        assert builders == ["0"], scenario
        for rank in (0, 1):
            assert np.array_equal(np.load(tmp_path / f"{scenario}.rank{rank}.npy"), expected)


def test_without_a_process_group_distributed_is_a_no_op(tmp_path) -> None:
    store = IndexedDataset(make_store(str(tmp_path / "wiki")))
    marker = str(tmp_path / "builds")
    cache = IndexCache(tmp_path / "cache")
    for shared in (False, True):
        cache.get_or_build(store, PARAMS, gpt_build(store, PARAMS, marker), shared_filesystem=shared)
    assert len(marker_lines(marker)) == 1


# -- GPT datasets through the cache ----------------------------------------------------------------


def test_build_gpt_dataset_uses_the_cache_and_matches_a_direct_build(tmp_path):
    from tokenport.builder import build_gpt_dataset
    from tokenport.samples.gpt import GPTDataset, GPTSampleConfig

    documents = random_documents(np.random.default_rng(7), 300, tokens=(3, 1000), length=(5, 120), eod=2)
    store = IndexedDataset(build_store(tmp_path / "s", documents, dtype=np.uint16))
    config = GPTSampleConfig(seq_length=64, eod_id=2, pad_id=1, reset_position_ids=True)
    cache = IndexCache(tmp_path / "cache")
    first = build_gpt_dataset(store, 500, config, 5, split="90,10,0", which="valid", cache=cache)
    entries = [name for name in os.listdir(tmp_path / "cache") if not name.endswith(".lock")]
    again = build_gpt_dataset(store, 500, config, 5, split="90,10,0", which="valid", cache=cache)
    assert len(entries) == 1
    assert _mapped(again.shuffle_index)  # loaded from the entry, not rebuilt
    begin, end = split_document_ranges("90,10,0", len(store))[1]
    direct = GPTDataset(store, np.arange(begin, end), 500, config, 5)
    assert len(first) == len(again) == len(direct)
    for i in range(0, len(direct), 7):
        for name, value in direct[i].items():
            assert np.array_equal(again[i][name], value), name
    assert build_gpt_dataset(store, 500, config, 5, split="90,10,0", which="test", cache=cache) is None
    with pytest.raises(ConfigError, match="which='dev'"):
        build_gpt_dataset(store, 500, config, 5, which="dev")
