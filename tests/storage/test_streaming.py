"""Streaming stores from S3 into DataLoader workers: fork and spawn safety, one download per node
(a shared disk block cache, counted at the proxy), honoured budgets, planned start-up, throttling."""

from __future__ import annotations

import json
import os
from collections import Counter

import numpy as np
import pytest

import tokenport as tp
from tests._support.s3_server import MotoS3
from tests._support.stores import build_store, random_documents
from tokenport.errors import StorageError
from tokenport.storage.nodecache import NodeCache
from tokenport.storage.remote import MEMORY, ObjectStoreSource, RemoteOptions, set_remote_memory_budget

torch = pytest.importorskip("torch")
pytest.importorskip("s3fs")

KIB = 1 << 10
FAST = {"backoff_initial": 0.001, "backoff_max": 0.01}


@pytest.fixture(scope="module")
def store(s3: MotoS3, tmp_path_factory) -> tuple[str, str]:
    """A store of 600 documents written locally and uploaded: (its local prefix, its s3:// URL)."""
    prefix = tmp_path_factory.mktemp("store") / "s"
    rng = np.random.default_rng(5)
    build_store(
        prefix, random_documents(rng, 600, tokens=(0, 257), length=(50, 400)), tokenizer=tp.load_tokenizer("byte")
    )
    for suffix in (".bin", ".idx", ".json"):
        s3.put(open(f"{prefix}{suffix}", "rb").read(), key=f"streaming/s{suffix}")
    return str(prefix), f"s3://{s3.bucket}/streaming/s"


def blob_source(s3: MotoS3, data: bytes, endpoint: str | None = None, **options: object) -> ObjectStoreSource:
    url = s3.put(data)
    return ObjectStoreSource(url, RemoteOptions(**{**FAST, **options}), **s3.storage_options(endpoint))


def random_bytes(n: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


# --- fork and spawn -------------------------------------------------------------------


class EveryItem(torch.utils.data.IterableDataset):
    """Each DataLoader worker reads every sequence of the store, in its own order, after a prefetch plan."""

    def __init__(self, dataset: tp.IndexedDataset) -> None:
        self.dataset = dataset

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        order = np.random.default_rng(info.id if info else 0).permutation(len(self.dataset))
        self.dataset.prefetch([(int(i), 0, None) for i in order])
        for i in order:
            yield int(i), torch.from_numpy(self.dataset[int(i)].astype(np.int64))


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_store_opened_in_parent_reads_in_workers(s3, store, tmp_path, start_method):
    local_prefix, url = store
    options = RemoteOptions(block_size=4 * KIB, storage_options=s3.storage_options(), **FAST)
    remote = tp.IndexedDataset(url, remote_options=options, cache_dir=str(tmp_path / "idx"))
    local = tp.IndexedDataset(local_prefix)
    assert np.array_equal(remote[3], local[3])  # the parent has read: its client, threads and cache exist
    torch.set_num_threads(1)
    loader = torch.utils.data.DataLoader(
        remote, batch_size=None, num_workers=2, multiprocessing_context=start_method, persistent_workers=False
    )
    seen = 0
    for i, tokens in enumerate(loader):
        assert np.array_equal(tokens.numpy(), local[i])
        seen += 1
    assert seen == len(local)
    assert np.array_equal(remote[len(local) - 1], local[len(local) - 1])  # and the parent still reads


def _report_clients(source: ObjectStoreSource, queue) -> None:
    import gc

    from tokenport.storage import remote

    gc.collect()  # a collected parent client would wait for its dead event loop here
    read = bytes(source.read(0, 100))
    parent = next(fs for fs in remote._FORKED_CLIENTS if id(fs) == source._parent_id)
    shares = source._fs.session.get_component("data_loader") is parent.session.get_component("data_loader")
    queue.put(([id(fs) for fs in remote._FORKED_CLIENTS], read, shares, source._fs.session is parent.session))


def test_a_forked_child_keeps_the_parents_client_and_makes_its_own(s3):
    import multiprocessing

    data = random_bytes(10_000, seed=22)
    src = blob_source(s3, data, node_cache_dir=None)  # the child reads with a client, not from disk
    assert bytes(src.read(0, 10)) == data[:10]  # the parent's client exists
    src._parent_id = id(src._fs)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_report_clients, args=(src, queue))
    child.start()
    kept, read, shares_models, shares_session = queue.get(timeout=60)
    child.join(60)
    assert id(src._fs) in kept and read == data[:100]
    # the child's client starts from the service models the parent parsed (not parsed again), in a
    # session of its own (no credentials or loop state of the parent's)
    assert shares_models and not shares_session


# --- one download per node ------------------------------------------------------------


def test_four_workers_fetch_each_block_once_and_a_restart_fetches_nothing(s3, store, fault_proxy, tmp_path):
    local_prefix, url = store
    bs = 4 * KIB
    options = RemoteOptions(
        block_size=bs,
        coalesce_gap=0,
        first_window_blocks=4,
        first_exact_bytes=0,
        node_cache_dir=str(tmp_path / "blocks"),
        storage_options=s3.storage_options(fault_proxy.endpoint_url),
        **FAST,
    )
    remote = tp.IndexedDataset(url, remote_options=options, cache_dir=str(tmp_path / "idx"))
    local = tp.IndexedDataset(local_prefix)
    fault_proxy.clear()
    torch.set_num_threads(1)
    loader = torch.utils.data.DataLoader(
        EveryItem(remote), batch_size=None, num_workers=4, multiprocessing_context="fork"
    )
    counts: Counter[int] = Counter()
    for i, tokens in loader:
        assert np.array_equal(tokens.numpy(), local[i])
        counts[i] += 1
    assert set(counts.values()) == {4} and len(counts) == len(local)
    size = os.path.getsize(local_prefix + ".bin")
    fetched: Counter[int] = Counter()
    for path, first, last in fault_proxy.ranges:
        assert path.endswith("/s.bin")
        assert first % bs == 0
        for block in range(first // bs, last // bs + 1):
            fetched[block] += 1
    assert sorted(fetched) == list(range(-(-size // bs)))  # every block of the .bin ...
    assert set(fetched.values()) == {1}  # ... downloaded once, not once per worker

    fault_proxy.clear()
    again = tp.IndexedDataset(url, remote_options=options, cache_dir=str(tmp_path / "idx"))
    for i in np.random.default_rng(9).permutation(len(local))[:200]:
        assert np.array_equal(again[int(i)], local[int(i)])
    assert fault_proxy.count("GET") == 0  # a warm restart reads the node cache


def test_node_cache_budget_is_never_exceeded(s3, tmp_path):
    data = random_bytes(400_000, seed=11)
    bs = 8 * KIB
    budget = 6 * bs
    src = blob_source(s3, data, block_size=bs, first_window_blocks=2, node_cache_dir=tmp_path, node_cache_bytes=budget)
    cache = NodeCache(tmp_path, budget)

    def on_disk() -> int:
        return sum(
            e.stat().st_size
            for d in os.scandir(tmp_path)
            if d.is_dir()
            for e in os.scandir(d)
            if e.name.endswith(".blk")
        )

    rng = np.random.default_rng(12)
    ranges = [(int(o), int(n)) for o, n in zip(rng.integers(0, len(data) - 3 * bs, 150), rng.integers(1, 3 * bs, 150))]
    src.prefetch(ranges)
    for offset, length in ranges:
        assert bytes(src.read(offset, length)) == data[offset : offset + length]
        assert on_disk() <= cache.used_bytes() <= budget  # bytes being written are counted first
    assert on_disk() > 0
    src.close()


def test_a_truncated_block_in_the_node_cache_is_fetched_again_not_served(s3, fault_proxy, tmp_path):
    data = random_bytes(100_000, seed=13)
    bs = 8 * KIB
    options = RemoteOptions(
        **{**FAST, "block_size": bs, "first_window_blocks": 2, "node_cache_dir": tmp_path, "node_cache_bytes": 1 << 20},
        storage_options=s3.storage_options(fault_proxy.endpoint_url),
    )
    url = s3.put(data)
    src = ObjectStoreSource(url, options)
    assert bytes(src.read(0, 100)) == data[:100]
    src.close()
    blocks = [e.path for d in os.scandir(tmp_path) if d.is_dir() for e in os.scandir(d) if e.name == "0.blk"]
    assert len(blocks) == 1
    os.truncate(blocks[0], 50)  # the disk lost the block's tail
    again = ObjectStoreSource(url, options)
    fault_proxy.clear()
    assert bytes(again.read(40, 100)) == data[40:140]
    assert fault_proxy.count("GET") == 1  # dropped and fetched again
    assert bytes(again.read(40, 100)) == data[40:140] and fault_proxy.count("GET") == 1  # then read from disk
    again.close()


def test_memory_budget_bounds_all_sources_together(s3):
    bs = 16 * KIB
    old = MEMORY.capacity
    set_remote_memory_budget(5 * bs)
    try:
        blobs = [random_bytes(300_000, seed=20 + k) for k in range(3)]
        sources = [blob_source(s3, b, block_size=bs, cache_bytes=256 << 20) for b in blobs]
        rng = np.random.default_rng(13)
        for _ in range(60):
            k = int(rng.integers(0, 3))
            offset = int(rng.integers(0, 300_000 - 40_000))
            assert bytes(sources[k].read(offset, 40_000)) == blobs[k][offset : offset + 40_000]
            assert sum(s.cached_bytes for s in sources) <= 5 * bs
            assert MEMORY.nbytes <= 5 * bs
    finally:
        set_remote_memory_budget(old)


# --- start-up ---------------------------------------------------------------------------


def test_prefetch_fetches_first_use_first(s3, fault_proxy):
    bs = 16 * KIB
    data = random_bytes(80 * bs, seed=14)
    src = blob_source(
        s3,
        data,
        fault_proxy.endpoint_url,
        block_size=bs,
        first_window_blocks=2,
        first_exact_bytes=0,
        coalesce_gap=0,
        max_concurrency=1,
    )
    fault_proxy.clear()
    order = np.random.default_rng(15).permutation(80)
    ranges = [(int(b) * bs + 100, 200) for b in order]
    src.prefetch(ranges)
    # the two blocks read first are fetched first, not the whole object in large spans
    first_gets = sorted(first // bs for _, first, _ in fault_proxy.ranges[:2])
    assert first_gets == sorted(int(b) for b in order[:2])
    assert all(last - first < bs for _, first, last in fault_proxy.ranges[:2])
    for offset, length in ranges:
        assert bytes(src.read(offset, length)) == data[offset : offset + length]
    blocks = Counter(b for _, first, last in fault_proxy.ranges for b in range(first // bs, last // bs + 1))
    assert sorted(blocks) == list(range(80)) and set(blocks.values()) == {1}  # each block once


def test_prefetch_first_fetches_exactly_the_leading_ranges_then_whole_blocks(s3, fault_proxy):
    bs = 16 * KIB
    data = random_bytes(80 * bs, seed=18)
    src = blob_source(s3, data, fault_proxy.endpoint_url, block_size=bs, first_exact_bytes=2000, coalesce_gap=0)
    fault_proxy.clear()
    order = np.random.default_rng(19).permutation(80)
    ranges = [(int(b) * bs + 100, 200) for b in order]
    ranges[1] = (ranges[0][0] + 300, 200)  # near the first range: one GET for both
    src.prefetch(ranges)
    spans: list[list[int]] = []  # the 10 leading ranges (2000 bytes), merged when 16 KiB apart or closer
    spare = 2000  # while the gaps bridged add up to at most first_exact_bytes
    for offset, length in sorted(ranges[:10]):
        if spans and offset - spans[-1][1] <= min(16 * KIB, spare):
            spare -= offset - spans[-1][1]
            spans[-1][1] = offset + length
        else:
            spans.append([offset, offset + length])
    assert [ranges[0][0], ranges[1][0] + 200] in spans  # the first two in one GET
    for offset, length in ranges:
        assert bytes(src.read(offset, length)) == data[offset : offset + length]
    n = len(spans)  # prefetch only started these GETs; the blocks wait for their answers
    assert sorted([first, last + 1] for _, first, last in fault_proxy.ranges[:n]) == spans
    blocks = Counter(b for _, first, last in fault_proxy.ranges[n:] for b in range(first // bs, last // bs + 1))
    assert set(blocks) == {int(b) for b in order[10:]} and set(blocks.values()) == {1}  # then whole blocks, once
    src.close()


# --- throttling -------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["429", "503"])
def test_throttling_waits_as_long_as_retry_after_says(s3, fault_proxy, fault):
    data = random_bytes(50_000, seed=16)
    src = blob_source(s3, data, fault_proxy.endpoint_url, backoff_initial=0.001, backoff_max=5.0)
    fault_proxy.retry_after = 0.3
    fault_proxy.clear()
    fault_proxy.inject(fault, first=2)
    assert bytes(src.read(1000, 3000)) == data[1000:4000]
    assert src.stats.retries == 2 and fault_proxy.count("GET", fault) == 2
    gaps = np.diff(fault_proxy.times)
    assert len(gaps) == 2 and (gaps >= 0.3).all()  # each retry waited at least what the store asked


def test_a_region_that_keeps_failing_raises_after_the_deadline(s3, fault_proxy):
    data = random_bytes(50_000, seed=17)
    src = blob_source(s3, data, fault_proxy.endpoint_url, max_retries=100, backoff_max=5.0, retry_deadline=0.5)
    fault_proxy.retry_after = 0.2
    fault_proxy.clear()
    fault_proxy.inject("503", first=1000)
    with pytest.raises(StorageError, match="retry_deadline") as info:
        src.read(0, 10)
    assert src.url in str(info.value) and "still failing" in str(info.value)
    assert 2 <= fault_proxy.count("GET") <= 4  # 0.2 s apart, stopped before 0.5 s: not 101 attempts


# --- a budget smaller than the data -------------------------------------------------------


class Batches(torch.utils.data.IterableDataset):
    """Each worker takes every other batch of one shuffled order (as a DataLoader deals them out),
    plans them with one `prefetch` and reads each batch with `get_many`."""

    def __init__(self, dataset: tp.IndexedDataset, order: np.ndarray, batch: int) -> None:
        self.dataset, self.order, self.batch = dataset, order, batch

    def batches(self, worker: int, workers: int) -> list[np.ndarray]:
        every = [self.order[b : b + self.batch] for b in range(0, len(self.order), self.batch)]
        return every[worker::workers]

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        mine = self.batches(info.id, info.num_workers)
        self.dataset.prefetch([(int(i), 0, None) for ids in mine for i in ids])
        for ids in mine:
            tokens, offsets = self.dataset.get_many(ids)
            yield ids, tokens, offsets


def test_two_workers_under_a_small_budget_do_not_thrash(s3, store, fault_proxy, tmp_path):
    local_prefix, url = store
    bs = 4 * KIB
    budget = 16 * bs
    blocks_dir = tmp_path / "blocks"
    options = RemoteOptions(
        block_size=bs,
        coalesce_gap=0,
        first_window_blocks=4,
        first_exact_bytes=0,
        node_cache_dir=str(blocks_dir),
        node_cache_bytes=budget,
        storage_options=s3.storage_options(fault_proxy.endpoint_url),
        **FAST,
    )
    remote = tp.IndexedDataset(url, remote_options=options, cache_dir=str(tmp_path / "idx"))
    local = tp.IndexedDataset(local_prefix)
    assert os.path.getsize(local_prefix + ".bin") > 3 * budget  # the data does not fit
    order = np.random.default_rng(21).permutation(len(local))
    dataset = Batches(remote, order, batch=8)
    fault_proxy.clear()
    torch.set_num_threads(1)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=None, num_workers=2, multiprocessing_context="fork", timeout=120
    )
    cache = NodeCache(blocks_dir, budget)
    seen = 0
    for ids, tokens, offsets in loader:
        for i, doc in zip(ids.numpy(), np.split(tokens.numpy(), offsets.numpy()[1:-1])):
            assert np.array_equal(doc, local[int(i)])
        seen += len(ids)
        assert cache.used_bytes() <= budget
    assert seen == len(local)
    pointers = local.sequence_pointers
    sizes = local.sequence_lengths * local.dtype.itemsize
    least = 0  # the fewest fetches possible: each worker alone with half the budget, evicting the block used last
    for worker in range(2):
        ids = np.concatenate(dataset.batches(worker, 2))
        firsts, lasts = pointers[ids] // bs, (pointers[ids] + sizes[ids] - 1) // bs
        least += fewest_fetches([b for f, last in zip(firsts, lasts) for b in range(int(f), int(last) + 1)], 8)
    fetched = sum(last // bs - first // bs + 1 for _, first, last in fault_proxy.ranges)
    assert fetched <= least, (fetched, least)  # unprotected, the workers evicted each other's next blocks: 1.4x


def fewest_fetches(uses: list[int], capacity: int) -> int:
    """Belady's bound: fetches of a cache of `capacity` blocks that knows the future (evicts the block
    whose next use is furthest), for the block uses `uses`."""
    later: dict[int, list[int]] = {}
    for t in range(len(uses) - 1, -1, -1):
        later.setdefault(uses[t], []).append(t)
    held: set[int] = set()
    fetches = 0
    for block in uses:
        later[block].pop()
        if block in held:
            continue
        fetches += 1
        if len(held) == capacity:
            held.remove(max(held, key=lambda b: later[b][-1] if later[b] else len(uses)))
        held.add(block)
    return fetches


def test_a_failed_exact_get_fails_the_read_that_needs_it_not_the_prefetch(s3, fault_proxy):
    bs = 16 * KIB
    data = random_bytes(8 * bs, seed=21)
    src = blob_source(s3, data, fault_proxy.endpoint_url, block_size=bs, first_exact_bytes=2000)
    fault_proxy.inject("403", first=1000)
    src.prefetch([(100, 200), (5 * bs, 200)])  # starts the GETs and returns
    for offset in (100, 5 * bs):
        with pytest.raises(StorageError, match=f"bytes {offset}-{offset + 200}"):
            src.read(offset, 200)
    fault_proxy.clear()  # the failure is not kept: the next read fetches the block
    assert bytes(src.read(5 * bs, 200)) == data[5 * bs : 5 * bs + 200]
    src.close()


def test_pins_are_written_once_blocks_fill_half_the_budget(tmp_path):
    cache = NodeCache(tmp_path, budget_bytes=4 * (KIB + 8))  # four blocks of 1 KiB and their checksums
    pins = tmp_path / ".pins"
    k = NodeCache.key("s3://b/o", 5 * KIB, '"e"', KIB)
    for index in range(5):  # blocks are published under their claims
        cache.release(cache.wait_claim(k, index))
    cache.pin({(k, 0)})
    assert not any(pins.iterdir())  # nothing can be evicted yet: no file written per batch
    assert cache.put(k, {0: b"a" * KIB, 1: b"b" * KIB}) == {0, 1}
    cache.pin({(k, 0)})
    assert [json.loads(p.read_text()) for p in pins.iterdir()] == [{"blocks": [[k, 0]]}]
    assert cache.put(k, {2: b"c" * KIB, 3: b"d" * KIB, 4: b"e" * KIB}) == {2, 3, 4}
    assert cache.has(k, 0) and not cache.has(k, 1)  # the pinned block outlived an older unpinned one
    cache.unpin()
    assert not any(pins.iterdir())
