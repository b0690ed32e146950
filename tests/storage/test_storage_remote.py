"""ObjectStoreSource and fetch_cached against a real moto S3 server, through real s3fs/botocore."""

from __future__ import annotations

import errno
import os
import pickle
import threading
import time

import numpy as np
import pytest

from tests._support.s3_server import FaultProxy, MotoS3
from tokenport.errors import ConfigError, StorageError
from tokenport.storage import MmapSource, open_source
from tokenport.storage.remote import (
    ObjectStoreSource,
    RemoteOptions,
    classify,
    fetch_cached,
    plan_spans,
)

KIB = 1 << 10
FAST = {"backoff_initial": 0.001, "backoff_max": 0.01}


def random_bytes(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


@pytest.fixture(scope="module")
def blob(s3: MotoS3) -> tuple[str, bytes]:
    """A 1.3 MiB object whose size is not a multiple of any block size used here."""
    data = random_bytes(1_300_001)
    return s3.put(data), data


def open_remote(s3: MotoS3, url: str, endpoint: str | None = None, **options: object) -> ObjectStoreSource:
    return ObjectStoreSource(url, RemoteOptions(**{**FAST, **options}), **s3.storage_options(endpoint))


# --- reads ----------------------------------------------------------------------------


def test_random_reads_equal_local_copy(s3, blob, tmp_path):
    url, data = blob
    local_path = tmp_path / "copy.bin"
    local_path.write_bytes(data)
    local = MmapSource(local_path)
    bs = 64 * KIB
    src = open_remote(s3, url, block_size=bs, cache_bytes=8 * bs)
    assert src.size == len(data) and src.etag
    rng = np.random.default_rng(1)
    cases = [(0, 0), (0, len(data)), (len(data) - 1, 1), (len(data), 0), (bs - 3, 7), (3 * bs, bs)]
    cases += [(len(data) - n, n) for n in (1, 17, bs + 5)]
    for _ in range(300):
        offset = int(rng.integers(0, len(data)))
        length = int(rng.integers(0, min(3 * bs, len(data) - offset) + 1))
        cases.append((offset, length))
    for offset, length in cases:
        assert bytes(src.read(offset, length)) == bytes(local.read(offset, length)), (offset, length)
    assert [bytes(b) for b in src.read_ranges(cases[:50])] == [bytes(local.read(o, n)) for o, n in cases[:50]]
    assert src.stats.cache_hits > 0 and src.stats.cache_misses > 0
    local.close()


def test_read_array(s3):
    tokens = np.arange(100_000, dtype=np.uint16) * 7
    url = s3.put(tokens.tobytes())
    src = open_remote(s3, url, block_size=16 * KIB)
    np.testing.assert_array_equal(src.read_array(2 * 1234, 5000, np.uint16), tokens[1234:6234])
    np.testing.assert_array_equal(src.read_array(0, len(tokens), np.uint16), tokens)


def test_out_of_bounds_read_raises(s3, blob):
    url, data = blob
    src = open_remote(s3, url)
    with pytest.raises(StorageError, match=url):
        src.read(len(data) - 10, 11)
    with pytest.raises(StorageError, match="outside the object"):
        src.prefetch([(-1, 5)])


def test_open_source_dispatches_urls(s3, blob):
    url, data = blob
    with open_source(url, options=RemoteOptions(block_size=32 * KIB), **s3.storage_options()) as src:
        assert isinstance(src, ObjectStoreSource)
        assert bytes(src.read(1000, 100)) == data[1000:1100]


def test_pickled_source_reads_in_another_process_shape(s3, blob):
    url, data = blob
    src = open_remote(s3, url, block_size=32 * KIB)
    src.read(0, 10)
    clone = pickle.loads(pickle.dumps(src))
    assert clone.size == src.size and clone.etag == src.etag and clone.stats.requests == 0
    assert bytes(clone.read(5000, 70_000)) == data[5000:75_000]


def test_concurrent_reads_are_correct(s3, blob):
    url, data = blob
    src = open_remote(s3, url, block_size=8 * KIB, cache_bytes=64 * KIB)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(40):
                offset = int(rng.integers(0, len(data) - 30_000))
                assert bytes(src.read(offset, 30_000)) == data[offset : offset + 30_000]
                assert src.cached_bytes <= 64 * KIB
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


# --- planning -------------------------------------------------------------------------


def test_plan_spans_merges_small_gaps_and_caps_length():
    assert plan_spans([], 1, 4) == []
    assert plan_spans([0, 1, 2, 5, 6, 9], 0, 100) == [(0, 3), (5, 7), (9, 10)]
    assert plan_spans([0, 1, 2, 5, 6, 9], 1, 100) == [(0, 3), (5, 7), (9, 10)]
    assert plan_spans([0, 1, 2, 5, 6, 9], 2, 100) == [(0, 10)]
    assert plan_spans([0, 2, 6], 1, 100) == [(0, 3), (6, 7)]
    assert plan_spans(list(range(10)), 0, 4) == [(0, 4), (4, 8), (8, 10)]


def test_prefetch_dense_ranges_takes_few_requests(s3):
    """Samples of 4098 bytes at a 4096-byte stride (Megatron-style, one token overlap), 60% of them wanted."""
    n_samples, stride, length = 1024, 4096, 4098
    data = random_bytes(n_samples * stride + 2, seed=2)
    url = s3.put(data)
    rng = np.random.default_rng(3)
    order = rng.permutation(n_samples)[: int(0.6 * n_samples)]
    ranges = [(int(i) * stride, length) for i in order]
    src = open_remote(
        s3,
        url,
        block_size=16 * KIB,
        coalesce_gap=64 * KIB,
        max_request_bytes=1 << 20,
        first_window_blocks=1 << 20,
        first_exact_bytes=0,
    )
    src.prefetch(ranges)  # the first window holds every block: fetched before prefetch returns
    requested = len(ranges) * length
    assert src.stats.requests <= len(ranges) // 50
    assert src.stats.bytes_fetched <= 2 * requested
    before = src.stats.requests
    for offset, n in ranges:
        assert bytes(src.read(offset, n)) == data[offset : offset + n]
    assert src.stats.requests == before and src.stats.cache_misses == 0
    src.prefetch(ranges)  # all cached: no new request
    assert src.stats.requests == before


def test_prefetch_keeps_far_apart_ranges_separate(s3, blob):
    url, data = blob
    src = open_remote(s3, url, block_size=4 * KIB, coalesce_gap=8 * KIB)
    ranges = [(900_000, 100), (10_000, 100), (500_000, 5000), (10_100, 50)]
    out = src.read_ranges(ranges)
    assert [bytes(b) for b in out] == [data[o : o + n] for o, n in ranges]
    assert src.stats.requests == 3  # the two ranges near 10_000 share a block
    assert src.stats.bytes_fetched <= 5 * 4 * KIB


# --- the cache bound ------------------------------------------------------------------


def test_cache_never_exceeds_its_bound(s3, blob):
    url, data = blob
    bs, cap = 16 * KIB, 5 * 16 * KIB
    src = open_remote(s3, url, block_size=bs, cache_bytes=cap, coalesce_gap=4 * bs)
    rng = np.random.default_rng(4)
    for _ in range(100):
        offset = int(rng.integers(0, len(data) - 3 * bs))
        length = int(rng.integers(1, 3 * bs))
        assert bytes(src.read(offset, length)) == data[offset : offset + length]
        assert src.cached_bytes <= cap
    big = (1000, 10 * bs)  # larger than the whole cache
    assert bytes(src.read(*big)) == data[1000 : 1000 + 10 * bs]
    assert src.cached_bytes <= cap
    ranges = [(int(o), 3000) for o in rng.integers(0, len(data) - 3000, 60)]
    src.prefetch(ranges)  # more blocks than fit: only a leading part is fetched
    assert src.cached_bytes <= cap
    assert [bytes(b) for b in src.read_ranges(ranges)] == [data[o : o + n] for o, n in ranges]
    assert src.cached_bytes <= cap
    src.close()
    assert src.cached_bytes == 0
    assert bytes(src.read(0, 10)) == data[:10]  # usable again after close


@pytest.mark.parametrize(
    "field, value",
    [
        ("block_size", 0),
        ("cache_bytes", 100),
        ("max_retries", -1),
        ("backoff_initial", -0.5),
        ("backoff_max", 0.01),
        ("coalesce_gap", -1),
        ("max_request_bytes", 10),
        ("max_concurrency", 0),
        ("block_size", True),
        ("storage_options", ["endpoint_url"]),
    ],
)
def test_bad_options_name_the_field(field, value):
    with pytest.raises(ConfigError, match=field):
        RemoteOptions(**{field: value})


# --- faults, with real traffic through the proxy --------------------------------------


@pytest.mark.parametrize("fault", ["500", "503"])
def test_transient_http_errors_are_retried(s3, blob, fault_proxy: FaultProxy, fault):
    url, data = blob
    src = open_remote(s3, url, fault_proxy.endpoint_url, block_size=64 * KIB)
    fault_proxy.inject(fault, first=3)
    assert bytes(src.read(70_000, 1000)) == data[70_000:71_000]
    assert src.stats.retries == 3 and src.stats.requests == 4
    assert fault_proxy.count("GET", fault) == 3 and fault_proxy.count("GET", "ok") == 1


def test_throttled_prefetch_recovers(s3, blob, fault_proxy):
    url, data = blob
    src = open_remote(s3, url, fault_proxy.endpoint_url, block_size=16 * KIB, coalesce_gap=0)
    fault_proxy.inject("503", every=3)
    ranges = [(i * 100_000, 2000) for i in range(13)]
    assert [bytes(b) for b in src.read_ranges(ranges)] == [data[o : o + n] for o, n in ranges]
    assert src.stats.retries == fault_proxy.count("GET", "503") > 0


def test_connection_resets_are_retried(s3, blob, fault_proxy):
    url, data = blob
    src = open_remote(s3, url, fault_proxy.endpoint_url, block_size=64 * KIB)
    fault_proxy.inject("reset", first=3)
    assert bytes(src.read(0, 100_000)) == data[:100_000]
    # aiohttp itself resends once when a reused keep-alive connection drops; the rest reach us
    assert 1 <= src.stats.retries <= 3
    assert fault_proxy.count("GET", "reset") == 3


def test_read_timeouts_are_retried(s3, blob, fault_proxy):
    url, data = blob
    fault_proxy.stall_seconds = 1.0
    src = ObjectStoreSource(
        url,
        RemoteOptions(**FAST),
        endpoint_url=fault_proxy.endpoint_url,
        config_kwargs={"read_timeout": 0.2},
    )
    fault_proxy.inject("stall", first=1)
    assert bytes(src.read(10, 10)) == data[10:20]
    assert src.stats.retries == 1


def test_metadata_request_is_retried(s3, blob, fault_proxy):
    url, data = blob
    fault_proxy.inject("503", first=2, methods=("HEAD",))
    src = open_remote(s3, url, fault_proxy.endpoint_url)
    assert src.size == len(data)
    assert fault_proxy.count("HEAD") == 3


def test_missing_object_fails_fast(s3, fault_proxy):
    url = f"s3://{s3.bucket}/no/such/key.bin"
    start = time.monotonic()
    with pytest.raises(StorageError, match="not found") as info:
        open_remote(s3, url, fault_proxy.endpoint_url, max_retries=6, backoff_initial=1.0, backoff_max=10.0)
    assert url in str(info.value)
    assert time.monotonic() - start < 2.0
    assert fault_proxy.count("HEAD") == 1


def test_access_denied_fails_fast(s3, blob, fault_proxy):
    url, _ = blob
    src = open_remote(s3, url, fault_proxy.endpoint_url, max_retries=6, backoff_initial=1.0, backoff_max=10.0)
    fault_proxy.inject("403", first=100)
    start = time.monotonic()
    with pytest.raises(StorageError, match="access denied") as info:
        src.read(0, 10)
    assert url in str(info.value) and "credentials" in str(info.value)
    assert time.monotonic() - start < 2.0
    assert fault_proxy.count("GET") == 1 and src.stats.retries == 0


def test_retries_exhausted_raises(s3, blob, fault_proxy):
    url, _ = blob
    src = open_remote(s3, url, fault_proxy.endpoint_url, max_retries=2)
    fault_proxy.inject("500", first=100)
    with pytest.raises(StorageError, match="after 3 attempts") as info:
        src.read(0, 10)
    assert url in str(info.value) and "internal error" in str(info.value)
    assert fault_proxy.count("GET") == 3 and src.stats.retries == 2


@pytest.mark.parametrize(
    "exc, kind",
    [
        (ConnectionResetError(errno.ECONNRESET, "reset"), "transient"),
        (TimeoutError("timed out"), "transient"),
        (OSError(errno.EBUSY, "SlowDown"), "transient"),
        (FileNotFoundError("gone"), "missing"),
        (PermissionError("no"), "denied"),
        (ValueError("a bug"), "failed"),
        (OSError(errno.EINVAL, "bad range"), "failed"),
    ],
)
def test_classify_builtin_errors(exc, kind):
    assert classify(exc) == kind


# --- fetch_cached ---------------------------------------------------------------------


def test_fetch_cached_downloads_once(s3, fault_proxy, tmp_path):
    key = "store/data.idx"
    url = s3.put(random_bytes(300_000, seed=5), key)
    options = RemoteOptions(storage_options=s3.storage_options(fault_proxy.endpoint_url), **FAST)
    path = fetch_cached(url, tmp_path, options)
    assert open(path, "rb").read() == random_bytes(300_000, seed=5)
    assert path.endswith("data.idx") and os.path.dirname(path) == str(tmp_path)
    assert fault_proxy.count("GET") == 1
    assert fetch_cached(url, tmp_path, options) == path
    assert fault_proxy.count("GET") == 1 and fault_proxy.count("HEAD") == 2
    assert os.listdir(tmp_path) == [os.path.basename(path)]  # no temporary files left behind

    s3.put(b"a new version", key)
    new_path = fetch_cached(url, tmp_path, options)
    assert new_path != path and open(new_path, "rb").read() == b"a new version"
    assert fault_proxy.count("GET") == 2


def test_fetch_cached_failure_leaves_nothing(s3, fault_proxy, tmp_path):
    url = s3.put(b"x" * 1000)
    endpoint = s3.storage_options(fault_proxy.endpoint_url)
    options = RemoteOptions(storage_options=endpoint, max_retries=1, **FAST)
    fault_proxy.inject("500", first=10)
    with pytest.raises(StorageError, match="after 2 attempts"):
        fetch_cached(url, tmp_path / "cache", options)
    assert not (tmp_path / "cache").exists() or os.listdir(tmp_path / "cache") == []
    fault_proxy.clear()
    fault_proxy.inject("500", first=1)
    path = fetch_cached(url, tmp_path / "cache", options)
    assert open(path, "rb").read() == b"x" * 1000


def test_fetch_cached_default_dir_and_empty_object(s3, tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENPORT_CACHE_DIR", str(tmp_path))
    url = s3.put(b"")
    path = fetch_cached(url, **s3.storage_options())
    assert os.path.dirname(path) == str(tmp_path / "objects")
    assert os.path.getsize(path) == 0
